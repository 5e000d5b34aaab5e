"""Stripe test mode for `make run`: localstripe, a stateful Stripe stand-in, on a loopback port.

Why: without Stripe keys nobody can top up, so a fresh machine could not try the billing page at
all. When STRIPE_SECRET_KEY is not set, the launcher exports test keys, STRIPE_API_BASE and
STRIPE_JS_URL pointing at localstripe (which serves a js.stripe.com stand-in with a card element),
and a webhook secret, and runs `python -m launcher.stripe` under the supervisor. That process
binds 127.0.0.1 only (localstripe's own entry point binds every interface), keeps its objects in the
data dir (localstripe's own default is a pickle in /tmp shared by every user), and registers the
platform's webhook URL itself each time it starts: localstripe forgets registrations on restart.
With real keys set nothing here runs. No Django import here.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import sys
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["TEST_PUBLISHABLE_KEY", "TEST_SECRET_KEY", "configure_test_mode", "main"]

TEST_SECRET_KEY = "sk_test_starverse_local"
TEST_PUBLISHABLE_KEY = "pk_test_starverse_local"
STATE_FILE = "localstripe.pickle"
# Read by the child, never put on its command line (`ps` shows command lines to every user).
WEBHOOK_URL_VAR = "STARVERSE_LOCALSTRIPE_WEBHOOK_URL"
STATE_VAR = "STARVERSE_LOCALSTRIPE_STATE"


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def configure_test_mode(environ: MutableMapping[str, str], data_dir: Path, webhook_url: str) -> str | None:
    """Set up Stripe test mode when no secret key is set; returns localstripe's command line, else None.

    Exports the STRIPE_* settings every child reads (web, worker) and what the localstripe child
    needs (its state file, the webhook URL to register); a set STRIPE_SECRET_KEY leaves `environ` as it is.
    """
    if environ.get("STRIPE_SECRET_KEY", "").strip():
        return None
    port = int(environ.get("STARVERSE_STRIPE_PORT", "").strip() or _free_loopback_port())
    base = f"http://127.0.0.1:{port}"
    environ.update(
        {
            "STRIPE_SECRET_KEY": TEST_SECRET_KEY,
            "STRIPE_PUBLISHABLE_KEY": TEST_PUBLISHABLE_KEY,
            "STRIPE_WEBHOOK_SECRET": "whsec_" + secrets.token_urlsafe(24),
            "STRIPE_API_BASE": base,
            "STRIPE_JS_URL": f"{base}/js.stripe.com/v3/",
            WEBHOOK_URL_VAR: webhook_url,
            STATE_VAR: str(data_dir / STATE_FILE),
        }
    )
    return f"{shlex.quote(sys.executable)} -m launcher.stripe --port {port}"


def _keep_state_in(path: Path) -> None:
    """Point localstripe's store at `path` instead of its fixed /tmp/localstripe.pickle."""
    import pickle

    from localstripe.resources import Store

    def load(store: Store) -> None:
        try:
            with path.open("rb") as handle:
                old = pickle.load(handle)  # noqa: S301 - our own file, in the private data dir
        except (FileNotFoundError, EOFError, pickle.UnpicklingError):
            return
        store.clear()
        store.update(old)

    def dump(store: Store) -> None:
        partial = path.with_suffix(".tmp")
        with partial.open("wb") as handle:
            pickle.dump(dict(store), handle, protocol=pickle.HIGHEST_PROTOCOL)
        partial.replace(path)

    Store.try_load_from_disk = load
    Store.dump_to_disk = dump


def main(argv: list[str] | None = None) -> int:
    """Run localstripe on 127.0.0.1:--port with the webhook registered; stops on SIGTERM/SIGINT."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m launcher.stripe", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)

    from aiohttp import web
    from localstripe.resources import store
    from localstripe.server import app
    from localstripe.webhooks import register_webhook

    state = os.environ.get(STATE_VAR)
    if state:
        _keep_state_in(Path(state))
        store.try_load_from_disk()
    url, secret = os.environ.get(WEBHOOK_URL_VAR), os.environ.get("STRIPE_WEBHOOK_SECRET")
    if url and secret:
        register_webhook("starverse", url, secret, None)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(f"localstripe (Stripe test mode) on http://127.0.0.1:{args.port}, webhooks to {url}", flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
