"""The Payment Element path beyond what localstripe can do: Alipay and WeChat Pay (tests/billing/payments/recorded/).

Stripe's objects are fed through the code that creates intents and handles webhooks: the intent
offers card, Alipay and WeChat Pay (with WeChat Pay's web client), a `requires_action` (Alipay's
redirect, WeChat Pay's QR code) credits nothing, `succeeded` credits once however often it comes,
and a failed attempt followed by a success credits once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stripe
from django.urls import reverse

from billing.choices import TransactionKind
from billing.models import Payment, PaymentStatus, StripeEvent, Transaction
from billing.services.ledger import balance_of
from billing.services.stripe_payments.topups import create_topup
from portal.celery import app as celery_app
from tests.support.localstripe import PUBLISHABLE_KEY, SECRET_KEY, WEBHOOK_SECRET, deliver

RECORDED = Path(__file__).with_name("recorded")
FIFTY, ONE_TWENTY_FIFTY = 50_000_000, 120_500_000


def recorded(name: str, user) -> dict:
    text = (RECORDED / f"{name}.json").read_text().replace('"USER_ID"', json.dumps(str(user.pk)))
    return json.loads(text)


class RecordedStripe:
    """Answers the stripe library's PaymentIntent calls with recorded objects; keeps what it was asked."""

    def __init__(self) -> None:
        self.intents: dict[str, dict] = {}
        self.created: list[dict] = []

    def show(self, intent: dict) -> None:
        """From now on Stripe's copy of this intent is `intent` (what a retrieve answers)."""
        self.intents[intent["id"]] = intent

    def create(self, **params):
        self.created.append(params)
        return self.retrieve(self.next_id)

    def retrieve(self, intent_id: str, **_):
        return stripe.PaymentIntent.construct_from(self.intents[intent_id], SECRET_KEY)


@pytest.fixture
def real_stripe(settings, monkeypatch) -> RecordedStripe:
    """Settings as for real Stripe (its Stripe.js), with the API answered from recorded objects."""
    settings.STRIPE_SECRET_KEY, settings.STRIPE_PUBLISHABLE_KEY = SECRET_KEY, PUBLISHABLE_KEY
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_API_BASE, settings.STRIPE_JS_URL = "https://api.stripe.com", "https://js.stripe.com/v3/"
    fake = RecordedStripe()
    monkeypatch.setattr(stripe.PaymentIntent, "create", fake.create)
    monkeypatch.setattr(stripe.PaymentIntent, "retrieve", fake.retrieve)
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield fake
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


def webhook(client, event: dict, capture) -> int:
    with capture(execute=True):
        return deliver(client, event).status_code


def topups(user) -> int:
    return Transaction.objects.filter(kind=TransactionKind.TOPUP, entries__account__owner=user).count()


@pytest.mark.django_db
def test_a_yuan_top_up_offers_card_alipay_and_wechat_pay(real_stripe, alice):
    intent = recorded("payment_intent_created", alice)
    real_stripe.show(intent)
    real_stripe.next_id = intent["id"]

    topup = create_topup(alice, FIFTY, nonce="recorded-nonce-1")

    (params,) = real_stripe.created
    assert params["payment_method_types"] == ["card", "alipay", "wechat_pay"]
    assert params["payment_method_options"] == {"wechat_pay": {"client": "web"}}
    assert params["amount"] == 5000 and params["currency"] == "cny"
    assert params["metadata"]["user_id"] == str(alice.pk)
    assert topup.client_secret == intent["client_secret"]
    assert topup.payment_method_types == ("card", "alipay", "wechat_pay")
    payment = Payment.objects.get(payment_intent_id=intent["id"])
    assert (payment.user, payment.amount, payment.status) == (alice, FIFTY, PaymentStatus.PENDING)


@pytest.mark.django_db
def test_the_top_up_endpoint_hands_the_payment_element_its_client_secret(real_stripe, alice, client):
    intent = recorded("payment_intent_created", alice)
    real_stripe.show(intent)
    real_stripe.next_id = intent["id"]
    client.force_login(alice)

    response = client.post(reverse("topup_create"), {"amount": "50", "nonce": "recorded-nonce-2"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["client_secret"] == intent["client_secret"]
    assert body["payment_method_types"] == ["card", "alipay", "wechat_pay"]


@pytest.mark.django_db
def test_alipay_credits_once_after_its_redirect_succeeds(
    real_stripe, alice, client, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    real_stripe.show(recorded("payment_intent_requires_action_alipay", alice))

    assert webhook(client, recorded("event_requires_action_alipay", alice), capture) == 200
    payment = Payment.objects.get(payment_intent_id="pi_3QRecordedCny0001")
    assert payment.status == PaymentStatus.PENDING and balance_of(alice) == 0

    real_stripe.show(recorded("payment_intent_succeeded_alipay", alice))
    succeeded = recorded("event_succeeded_alipay", alice)
    for _ in range(3):  # Stripe delivers at least once
        assert webhook(client, succeeded, capture) == 200

    payment.refresh_from_db()
    assert payment.status == PaymentStatus.SUCCEEDED
    assert balance_of(alice) == FIFTY and topups(alice) == 1
    assert StripeEvent.objects.filter(processed_at__isnull=False).count() == 2


@pytest.mark.django_db
def test_wechat_pay_credits_once_after_the_qr_code_is_paid(
    real_stripe, alice, client, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    waiting = recorded("payment_intent_requires_action_wechat_pay", alice)
    assert waiting["next_action"]["type"] == "wechat_pay_display_qr_code"
    real_stripe.show(waiting)
    webhook(client, recorded("event_requires_action_wechat_pay", alice), capture)
    assert balance_of(alice) == 0

    real_stripe.show(recorded("payment_intent_succeeded_wechat_pay", alice))
    succeeded = recorded("event_succeeded_wechat_pay", alice)
    webhook(client, succeeded, capture)
    # The same success under another event id (a resent event): the ledger key is per PaymentIntent.
    webhook(client, {**succeeded, "id": "evt_3QRecordedWechat99"}, capture)

    assert balance_of(alice) == ONE_TWENTY_FIFTY and topups(alice) == 1
    assert Payment.objects.get(payment_intent_id=waiting["id"]).amount == ONE_TWENTY_FIFTY


@pytest.mark.django_db
def test_a_failed_alipay_attempt_credits_nothing_and_a_later_success_credits_once(
    real_stripe, alice, client, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    real_stripe.show(recorded("payment_intent_payment_failed_alipay", alice))

    webhook(client, recorded("event_payment_failed_alipay", alice), capture)

    payment = Payment.objects.get(payment_intent_id="pi_3QRecordedCny0001")
    assert payment.status == PaymentStatus.FAILED and balance_of(alice) == 0

    # The Payment Element lets the user try again on the same intent, e.g. with a card.
    real_stripe.show(recorded("payment_intent_succeeded_alipay", alice))
    webhook(client, recorded("event_succeeded_alipay", alice), capture)
    webhook(client, recorded("event_payment_failed_alipay", alice), capture)  # late, out of order

    payment.refresh_from_db()
    assert payment.status == PaymentStatus.SUCCEEDED
    assert balance_of(alice) == FIFTY and topups(alice) == 1


@pytest.mark.django_db
def test_a_succeeded_event_whose_intent_stripe_says_is_not_paid_credits_nothing(
    real_stripe, alice, client, django_capture_on_commit_callbacks
):
    """The event body is only a hint: Stripe's current copy of the intent decides."""
    real_stripe.show(recorded("payment_intent_requires_action_alipay", alice))

    webhook(client, recorded("event_succeeded_alipay", alice), django_capture_on_commit_callbacks)

    assert balance_of(alice) == 0 and topups(alice) == 0


@pytest.mark.django_db
def test_the_billing_page_uses_the_payment_element_with_real_stripe_js(real_stripe, alice, client):
    client.force_login(alice)

    html = client.get("/billing/").content.decode()

    assert 'data-element="payment"' in html and 'data-testid="payment-element"' in html
    assert 'data-testid="card-element"' not in html
    assert '<script src="https://js.stripe.com/v3/"></script>' in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("secret_key", "banner"),
    [("sk_test_abc", True), ("rk_test_abc", True), ("sk_live_abc", False), ("rk_live_abc", False)],
)
def test_a_test_key_shows_the_test_mode_banner_and_a_live_key_does_not(
    real_stripe, alice, client, settings, secret_key, banner
):
    settings.STRIPE_SECRET_KEY = secret_key
    client.force_login(alice)

    html = client.get("/billing/").content.decode()

    assert ("Test mode: no real money. Use card 4242 4242 4242 4242" in html) is banner
