"""Payments tests run against localstripe, a stateful Stripe stand-in, started once per test run.

The fixtures `localstripe` and `stripe_on` are in tests/support/fixtures/stripe.py; the helpers are here.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import stripe

SECRET_KEY = "sk_test_starverse"
PUBLISHABLE_KEY = "pk_test_starverse"
WEBHOOK_SECRET = "whsec_starverse_test"
GOOD_CARD = "4242424242424242"
DECLINING_CARD = "4000000000000341"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalStripe:
    """One localstripe process for the whole run (it is global state; tests make their own objects)."""

    _instance: LocalStripe | None = None

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="localstripe-")) / "localstripe.log"
        binary = Path(sys.executable).with_name("localstripe")
        command = [str(binary)] if binary.exists() else [sys.executable, "-m", "localstripe"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), "--from-scratch"],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=self.log.parent,
        )
        atexit.register(self.stop)
        self._wait_until_up()

    @classmethod
    def get(cls) -> LocalStripe:
        if cls._instance is None or cls._instance.process.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"localstripe exited: {self.log.read_text()}")
            try:
                httpx.get(f"{self.url}/js.stripe.com/v3/", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("localstripe did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def register_webhook(self, url: str, secret: str = WEBHOOK_SECRET, name: str = "starverse") -> None:
        response = httpx.post(f"{self.url}/_config/webhooks/{name}", data={"url": url, "secret": secret})
        response.raise_for_status()

    def js_url(self) -> str:
        return f"{self.url}/js.stripe.com/v3/"


def paid_intent(user, amount_minor: int = 5000, card: str = GOOD_CARD, currency: str = "cny"):
    """A PaymentIntent made and confirmed directly on localstripe, as if from another browser tab."""
    intent = stripe.PaymentIntent.create(
        amount=amount_minor, currency=currency, payment_method_types=["card"], metadata={"user_id": str(user.pk)}
    )
    method = stripe.PaymentMethod.create(
        type="card", card={"number": card, "exp_month": 12, "exp_year": 2034, "cvc": "123"}
    )
    stripe.PaymentIntent.modify(intent.id, payment_method=method.id)
    try:
        return stripe.PaymentIntent.confirm(intent.id)
    except stripe.CardError:
        return stripe.PaymentIntent.retrieve(intent.id)


def events_for(intent_id: str, event_type: str) -> list[dict]:
    """localstripe's events about one PaymentIntent, as the dicts it would POST to a webhook."""
    events = stripe.Event.list(type=event_type, limit=100).auto_paging_iter()
    return [event.to_dict() for event in events if event.data.object.id == intent_id]


def signature_for(payload: bytes, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def body_of(event: dict) -> bytes:
    return json.dumps(event, indent=2, sort_keys=True).encode()


def deliver(client, event: dict, **signature_kwargs):
    """POST `event` to the webhook endpoint signed like Stripe does."""
    payload = body_of(event)
    return client.post(
        "/stripe/webhook/",
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signature_for(payload, **signature_kwargs),
    )


def environment_has_localstripe() -> bool:
    return Path(sys.executable).with_name("localstripe").exists() or bool(os.environ.get("LOCALSTRIPE"))
