"""`make run`'s Stripe test mode (launcher/platform.py stripe_test_mode, launcher/stripe.py):
without STRIPE_SECRET_KEY the launcher configures test keys and runs localstripe on loopback, whose
signed webhooks reach the platform's webhook URL; with real keys set, nothing of that happens."""

from __future__ import annotations

import http.server
import os
import shlex
import subprocess
import threading
import time

import httpx
import pytest
import stripe

from launcher.platform import stripe_test_mode
from launcher.stores import free_port


class Hooks(http.server.BaseHTTPRequestHandler):
    """Stands in for the platform's /stripe/webhook/: keeps what it is sent."""

    received: list[tuple[str, bytes, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hooks.received.append((self.path, body, self.headers.get("Stripe-Signature", "")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def webhook_receiver():
    Hooks.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_without_keys_test_mode_is_configured(tmp_path):
    environ = {"PORT": "8123"}

    processes = stripe_test_mode(tmp_path, environ)

    base = environ["STRIPE_API_BASE"]
    assert base.startswith("http://127.0.0.1:")
    assert environ["STRIPE_SECRET_KEY"].startswith("sk_test_")
    assert environ["STRIPE_PUBLISHABLE_KEY"].startswith("pk_test_")
    assert environ["STRIPE_WEBHOOK_SECRET"].startswith("whsec_")
    assert environ["STRIPE_JS_URL"] == f"{base}/js.stripe.com/v3/"
    assert environ["STARVERSE_LOCALSTRIPE_WEBHOOK_URL"] == "http://127.0.0.1:8123/stripe/webhook/"
    assert list(processes) == ["stripe"]
    assert processes["stripe"].endswith(f"-m launcher.stripe --port {base.rsplit(':', 1)[1]}")
    assert environ["STRIPE_WEBHOOK_SECRET"] not in processes["stripe"]  # never on a command line


def test_each_launch_gets_its_own_webhook_secret(tmp_path):
    first, second = {}, {}
    stripe_test_mode(tmp_path, first)
    stripe_test_mode(tmp_path, second)
    assert first["STRIPE_WEBHOOK_SECRET"] != second["STRIPE_WEBHOOK_SECRET"]


def test_with_real_keys_nothing_of_test_mode_runs(tmp_path):
    given = {"STRIPE_SECRET_KEY": "sk_live_abc", "STRIPE_PUBLISHABLE_KEY": "pk_live_abc"}
    environ = dict(given)

    assert stripe_test_mode(tmp_path, environ) == {}
    assert environ == given


def test_localstripe_runs_on_loopback_and_signs_webhooks_to_the_platform(tmp_path, webhook_receiver):
    environ = {"STARVERSE_STRIPE_PORT": str(free_port()), "PORT": str(webhook_receiver)}
    command = stripe_test_mode(tmp_path, environ)["stripe"]
    child = subprocess.Popen(shlex.split(command), env={**os.environ, **environ}, stdout=subprocess.DEVNULL)
    try:
        base = environ["STRIPE_API_BASE"]
        deadline = time.monotonic() + 20
        while True:
            try:
                script = httpx.get(environ["STRIPE_JS_URL"], timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and child.poll() is None, "localstripe did not start"
                time.sleep(0.2)
        assert "localstripe" in script.text and script.headers["content-type"].startswith("application/javascript")

        client = stripe.StripeClient(environ["STRIPE_SECRET_KEY"], base_addresses={"api": base})
        intent = client.v1.payment_intents.create(params={"amount": 5000, "currency": "cny"})
        method = client.v1.payment_methods.create(
            params={
                "type": "card",
                "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2034, "cvc": "123"},
            }
        )
        client.v1.payment_intents.update(intent.id, params={"payment_method": method.id})
        client.v1.payment_intents.confirm(intent.id)

        deadline = time.monotonic() + 15
        while not any(b'"payment_intent.succeeded"' in body for _, body, _ in Hooks.received):
            assert time.monotonic() < deadline, "no webhook arrived"
            time.sleep(0.2)
        path, body, signature = next(hook for hook in Hooks.received if b"payment_intent.succeeded" in hook[1])
        assert path == "/stripe/webhook/"
        event = stripe.Webhook.construct_event(body, signature, environ["STRIPE_WEBHOOK_SECRET"])
        assert event.data.object.id == intent.id
        assert (tmp_path / "localstripe.pickle").exists()  # its objects live in the data dir, not /tmp
    finally:
        child.terminate()
        child.wait(timeout=10)
