"""`python -m launcher run|stores`: the one process behind `make run`.

Why: a fresh machine should get the whole platform (stores, migrations, web, Celery) from one
command, one crashed process should not take the rest down, and Ctrl-C should take all of it
down again. Web, worker, beat, the demo agents (their command lines: processes.py) and the embedded
stores run under our small supervisor (supervisor.py): each restarts on its own with backoff; on
Ctrl-C the stores are stopped last, so that the platform processes can still reach them while they
shut down. No Django import here: Django only runs in the children, after DATABASE_URL and
REDIS_URL are known.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from types import FrameType

from launcher._child import ChildServer, StoreError, ensure_port_free
from launcher.private import mail_to_private_files, make_private
from launcher.processes import (
    agent_address,
    agent_service_command,
    env_port,
    platform_processes,
    web_address,
    web_server_command,
)
from launcher.s3 import EmbeddedS3
from launcher.stores import EmbeddedPostgres, EmbeddedRedis
from launcher.stripe import configure_test_mode
from launcher.supervisor import Output, RestartPolicy, Supervisor, command_children

REPO = Path(__file__).resolve().parents[1]
SETUP_COMMANDS = (
    ("migrate", "--noinput"),
    ("collectstatic", "--noinput", "--verbosity", "0"),
    ("seed_catalog",),
    ("ensure_operator",),
    ("ensure_demo_fleet",),
)
WEB_READY_TIMEOUT_S = 120.0
# Where datasets, models and checkpoints are kept (STARVERSE_STORAGE): a folder of the data dir, or an
# embedded S3 server (SeaweedFS) with its data in the data dir; a STORAGE_URL that is set wins over both.
STORAGE_DIRECTORY, STORAGE_EMBEDDED_S3 = "directory", "embedded-s3"


class SetupFailed(Exception):
    """A setup step (migrate, seed, ...) failed; nothing long-running was started."""


_OUTPUT = threading.Lock()  # honcho's printer writes a line and its newline in two writes


def say(message: str) -> None:
    """One launcher line, whole and flushed, never in the middle of a child's line."""
    with _OUTPUT:
        sys.stdout.write(f"[starverse] {message}\n")
        sys.stdout.flush()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM behaves like Ctrl-C, so every `finally` (stopping the stores) runs."""
    raise KeyboardInterrupt


def prepare_data_dir() -> Path:
    """`$STARVERSE_DATA_DIR` or `<repo>/.data`, created private (launcher.private), exported to the children."""
    data_dir = Path(os.environ.get("STARVERSE_DATA_DIR") or REPO / ".data").resolve()
    make_private(data_dir)
    os.environ["STARVERSE_DATA_DIR"] = str(data_dir)
    if (mail := mail_to_private_files(data_dir)) is not None:
        say(f"mail (sign-up confirmations, password resets) is saved under {mail}, readable only by you")
    return data_dir


def ensure_secret_key(data_dir: Path) -> None:
    """A per-machine secret key, made once, so sessions survive restarts without configuration."""
    key_file = data_dir / "secret_key"
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50) + "\n")
    if not os.environ.get("DJANGO_SECRET_KEY") and not os.environ.get("DJANGO_SECRET_KEY_FILE"):
        os.environ["DJANGO_SECRET_KEY_FILE"] = str(key_file)


def start_stores(data_dir: Path, started: list[ChildServer], *, keep_external: bool) -> None:
    """Start the embedded stores and export their URLs; with `keep_external`, a set URL wins."""
    if not (keep_external and os.environ.get("DATABASE_URL")):
        pg = EmbeddedPostgres(data_dir, env_port("STARVERSE_PG_PORT", 54329))
        started.append(pg)  # before start(): a Ctrl-C during startup must still stop it
        say(f"starting embedded PostgreSQL on 127.0.0.1:{pg.port} (data in {pg.pgdata})")
        pg.start()
        os.environ["DATABASE_URL"] = pg.url
    if not (keep_external and os.environ.get("REDIS_URL")):
        redis = EmbeddedRedis(data_dir, env_port("STARVERSE_REDIS_PORT", 63799))
        started.append(redis)
        say(f"starting embedded Redis on 127.0.0.1:{redis.port} (data in {redis.redis_dir})")
        redis.start()
        os.environ["REDIS_URL"] = redis.url
    start_storage(data_dir, started, os.environ)


def start_storage(data_dir: Path, started: list[ChildServer], environ: MutableMapping[str, str]) -> None:
    """Choose the object store and export it (STORAGE_URL, and AWS_* for S3) to the platform's children: web,
    agent service, workers and beat. The demo agents don't get it (demo_fleet_processes): their ranks read and
    write datasets, models and checkpoints through storage grants.

    STARVERSE_STORAGE=embedded-s3 starts SeaweedFS (port STARVERSE_S3_PORT, default 8333; data in
    <data dir>/s3); otherwise a set STORAGE_URL is kept, else the folder <data dir>/storage is used.
    """
    choice = environ.get("STARVERSE_STORAGE", "").strip() or STORAGE_DIRECTORY
    if choice not in (STORAGE_DIRECTORY, STORAGE_EMBEDDED_S3):
        raise StoreError(
            f"STARVERSE_STORAGE={choice!r} is not a storage choice: use {STORAGE_DIRECTORY} (the default) "
            f"or {STORAGE_EMBEDDED_S3}, or set STORAGE_URL to your own store."
        )
    if choice == STORAGE_EMBEDDED_S3:
        if environ.get("STORAGE_URL"):
            raise StoreError(
                f"Both STARVERSE_STORAGE=embedded-s3 and STORAGE_URL={environ['STORAGE_URL']} are set: "
                "unset one (STORAGE_URL names a store of your own)."
            )
        s3 = EmbeddedS3(data_dir, env_port("STARVERSE_S3_PORT", 8333, environ))
        started.append(s3)
        say(f"starting embedded S3 (SeaweedFS) on {s3.endpoint} (data in {s3.s3_dir})")
        s3.start()
        environ.update(s3.environment())
    elif not environ.get("STORAGE_URL"):
        environ["STORAGE_URL"] = f"file://{data_dir / 'storage'}"
    say(f"object storage: {environ['STORAGE_URL']}")


def stripe_test_mode(data_dir: Path, environ: MutableMapping[str, str]) -> dict[str, str]:
    """Without STRIPE_SECRET_KEY: Stripe test mode (launcher.stripe), so top-ups work out of the box.

    Returns the localstripe process to run under the supervisor ({} when real keys are set). Its
    webhooks go to this platform's own /stripe/webhook/ on the web server's address.
    """
    host, port = web_address(environ)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    webhook_url = (
        f"http://[{shown}]:{port}/stripe/webhook/" if ":" in shown else f"http://{shown}:{port}/stripe/webhook/"
    )
    command = configure_test_mode(environ, data_dir, webhook_url)
    if command is None:
        say("Stripe: live configuration from STRIPE_SECRET_KEY (test mode not started)")
        return {}
    say(
        f"Stripe test mode: localstripe on {environ['STRIPE_API_BASE']}, no real money "
        "(card 4242 4242 4242 4242); set STRIPE_SECRET_KEY for real Stripe"
    )
    return {"stripe": command}


def stop_stores(started: list[ChildServer]) -> None:
    """Stop in reverse order; further Ctrl-C is ignored meanwhile (each stop is bounded)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for server in reversed(started):
            if server.pid is not None:
                say(f"stopping {server.name} (pid {server.pid})")
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def manage(*args: str) -> None:
    """Run one `manage.py` command with the venv's python; a failure stops the launch loudly."""
    command = [sys.executable, "manage.py", *args]
    say(f"manage.py {' '.join(args)}")
    done = subprocess.run(command, cwd=REPO, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise SetupFailed(f"`manage.py {' '.join(args)}` failed with exit code {done.returncode}")


def _announce_when_up(host: str, port: int, stopped: threading.Event) -> None:
    """Print the URL once the web process answers HTTP at all (any status counts)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    target = f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    deadline = time.monotonic() + WEB_READY_TIMEOUT_S
    while not stopped.wait(0.5):
        try:
            opener.open(target, timeout=5).close()
        except urllib.error.HTTPError:
            pass  # an error page is still an answer
        except OSError:
            if time.monotonic() > deadline:
                say(f"web did not answer on {target} within {WEB_READY_TIMEOUT_S:.0f}s; see its lines above")
                return
            continue
        say(f"Starverse is running at {target.rstrip('/')}  (Ctrl-C to stop)")
        return


def serve(
    processes: Mapping[str, object],
    host: str,
    port: int,
    stores: Sequence[ChildServer] = (),
    policy: RestartPolicy | None = None,
) -> int:
    """Run the processes (and watch the running `stores`) until Ctrl-C/SIGTERM, restarting what dies.

    `processes`: name -> command line, or a supervisor.ProcessSpec when a child
    needs variables of its own. Returns 0 once everything is stopped.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)  # as main() does, for callers that come straight here
    output = Output(sys.stdout, _OUTPUT)
    supervisor = Supervisor(output, policy)
    for server in stores:
        supervisor.add_store(server)
    for child in command_children(processes, output, os.environ, REPO):
        supervisor.add_command(child)
    stopped = threading.Event()
    threading.Thread(target=_announce_when_up, args=(host, port, stopped), daemon=True).start()
    try:
        supervisor.run()
    except KeyboardInterrupt:
        pass  # run() has stopped the children and the stores on its way out
    finally:
        stopped.set()
    return 0


def run() -> int:
    """`make run`: stores, setup commands, then web/worker/beat until Ctrl-C."""
    data_dir = prepare_data_dir()
    ensure_secret_key(data_dir)
    os.environ.setdefault("LOG_FORMAT", "console")  # readable lines on the terminal (docs/OPERATIONS.md)
    host, port = web_address(os.environ)
    ensure_port_free(port, "PORT", "the web server", host)
    ensure_port_free(agent_address(os.environ)[1], "AGENT_PORT", "the agent service", host)
    # A bad WEB_WORKERS, WEB_THREADS or AGENT_WORKERS is refused before anything starts.
    web_server_command(os.environ, f"{host}:{port}")
    agent_service_command(os.environ)
    started: list[ChildServer] = []
    try:
        start_stores(data_dir, started, keep_external=True)
        payments = stripe_test_mode(data_dir, os.environ)
        for args in SETUP_COMMANDS:
            manage(*args)
        return serve({**payments, **platform_processes(os.environ)}, host, port, started)
    finally:
        stop_stores(started)  # a no-op when serve() got that far: it stops them after the children


def stores() -> int:
    """`stores`: only the embedded stores, their URLs on stdout, until Ctrl-C/SIGTERM (restarted if they die).

    Object storage is the data dir's folder, or embedded S3 with STARVERSE_STORAGE=embedded-s3."""
    started: list[ChildServer] = []
    try:
        start_stores(prepare_data_dir(), started, keep_external=False)
        names = ("DATABASE_URL", "REDIS_URL", "STORAGE_URL", "AWS_ENDPOINT_URL")
        print("\n".join(f"{name}={os.environ[name]}" for name in names if name in os.environ), flush=True)
        supervisor = Supervisor(Output(sys.stdout, _OUTPUT))
        for server in started:
            supervisor.add_store(server)
        supervisor.run()
        return 0
    finally:
        stop_stores(started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="stores, migrations, web, agent service, Celery worker and beat (make run)")
    commands.add_parser("stores", help="only the embedded stores (PostgreSQL, Redis, S3 if chosen); prints their URLs")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        return run() if args.command == "run" else stores()
    except KeyboardInterrupt:
        return 0  # stopped before the platform was up; the `finally`s have cleaned up
    except (StoreError, SetupFailed) as exc:
        say(f"error: {exc}")
        return 1
