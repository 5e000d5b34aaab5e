"""Bad input on the top-up API and page: a clear answer, and nothing created anywhere."""

# ruff: noqa: F811

from __future__ import annotations

import pytest
import stripe

from billing.models import OperatorSettings, Payment
from portal.models import ApiToken
from tests.support.accounts import PASSWORD

BAD_AMOUNTS = [
    ("5.00", "The smallest top-up is ¥10.00."),
    ("10000.01", "The largest top-up is ¥10,000.00."),
    ("fifty", "Enter the amount as a number"),
    ("", "This field"),
    ("NaN", "Enter the amount as a number"),
    ("50.001", "at most two decimals"),
    ("-50", "The smallest top-up"),
    ("1e40", "The largest top-up"),
]


@pytest.fixture
def token(alice) -> str:
    _, raw = ApiToken.issue(alice, name="ci")
    return raw


def api_post(client, token, body, **headers):
    return client.post(
        "/api/v1/topups/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **headers
    )


def intents_on_stripe() -> int:
    return len(stripe.PaymentIntent.list(limit=100).data)


@pytest.mark.django_db
def test_the_api_creates_a_payment_intent_in_fen(client, stripe_on, alice, token):
    response = api_post(client, token, {"amount": "50.00"})

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "client_secret", "amount", "currency", "status"}
    assert (body["amount"], body["currency"], body["status"]) == ("50.00", "CNY", "requires_payment_method")
    intent = stripe.PaymentIntent.retrieve(body["id"])
    assert (intent.amount, intent.currency, intent.metadata["user_id"]) == (5000, "cny", str(alice.pk))
    payment = Payment.objects.get(payment_intent_id=body["id"])
    assert (payment.user, payment.amount, payment.credited) == (alice, 50_000_000, None)


@pytest.mark.django_db
def test_an_api_retry_with_the_same_idempotency_key_returns_the_same_intent(client, stripe_on, token):
    first = api_post(client, token, {"amount": "50.00"}, HTTP_IDEMPOTENCY_KEY="retry-key-0001").json()
    second = api_post(client, token, {"amount": "50.00"}, HTTP_IDEMPOTENCY_KEY="retry-key-0001").json()

    assert first["id"] == second["id"]
    assert Payment.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(("amount", "message"), BAD_AMOUNTS)
def test_the_api_refuses_a_bad_amount(client, stripe_on, token, amount, message):
    before = intents_on_stripe()

    response = api_post(client, token, {"amount": amount})

    assert response.status_code == 400
    assert message in response.json()["errors"]["amount"][0]
    assert "amount" in response.json()["detail"]
    assert not Payment.objects.exists()
    assert intents_on_stripe() == before


@pytest.mark.django_db
def test_the_api_refuses_a_missing_amount(client, stripe_on, token):
    response = api_post(client, token, {})

    assert response.status_code == 400
    assert "amount" in response.json()["errors"]


@pytest.mark.django_db
def test_the_limits_come_from_the_operator_settings(client, stripe_on, token):
    OperatorSettings.objects.update_or_create(pk=1, defaults={"topup_minimum": 100_000_000})

    response = api_post(client, token, {"amount": "50.00"})

    assert response.json()["errors"]["amount"] == ["The smallest top-up is ¥100.00."]


@pytest.mark.django_db
def test_the_api_needs_a_token(client, stripe_on):
    response = client.post("/api/v1/topups/", {"amount": "50.00"}, content_type="application/json")

    assert response.status_code in (401, 403)
    assert not Payment.objects.exists()


@pytest.mark.django_db
def test_without_keys_the_api_answers_503(client, settings, token):
    settings.STRIPE_SECRET_KEY = settings.STRIPE_PUBLISHABLE_KEY = ""

    response = api_post(client, token, {"amount": "50.00"})

    assert response.status_code == 503
    assert "not configured" in response.json()["detail"]


@pytest.mark.django_db
def test_without_keys_the_page_says_top_ups_are_not_configured(client, settings, alice):
    settings.STRIPE_SECRET_KEY = settings.STRIPE_PUBLISHABLE_KEY = ""
    client.login(username="alice", password=PASSWORD)

    page = client.get("/billing/").content.decode()

    assert "Top-ups are not configured" in page
    assert "card-element" not in page


@pytest.mark.django_db
def test_the_page_shows_the_balance_and_the_card_form(client, stripe_on, alice):
    client.login(username="alice", password=PASSWORD)

    page = client.get("/billing/").content.decode()

    assert 'data-testid="balance"' in page
    assert 'id="card-element"' in page
    assert stripe_on.js_url() in page
    assert "Between ¥10.00 and ¥10,000.00" in page


@pytest.mark.django_db
def test_the_page_needs_a_login(client, stripe_on):
    assert client.get("/billing/").status_code == 302


@pytest.mark.django_db
@pytest.mark.parametrize(("amount", "message"), BAD_AMOUNTS)
def test_the_page_refuses_a_bad_amount(client, stripe_on, alice, amount, message):
    client.login(username="alice", password=PASSWORD)
    before = intents_on_stripe()

    response = client.post("/billing/topups/", {"amount": amount, "nonce": "form-nonce-0001"})

    assert response.status_code == 400
    assert message in response.json()["errors"]["amount"][0]
    assert not Payment.objects.exists()
    assert intents_on_stripe() == before


@pytest.mark.django_db
def test_a_double_submitted_page_form_creates_one_intent(client, stripe_on, alice):
    client.login(username="alice", password=PASSWORD)

    first = client.post("/billing/topups/", {"amount": "50", "nonce": "form-nonce-0002"}).json()
    second = client.post("/billing/topups/", {"amount": "50", "nonce": "form-nonce-0002"}).json()

    assert first["id"] == second["id"]
    assert Payment.objects.count() == 1


@pytest.mark.django_db
def test_a_user_cannot_confirm_someone_elses_top_up(client, stripe_on, alice, bob):
    client.login(username="alice", password=PASSWORD)
    intent = client.post("/billing/topups/", {"amount": "50", "nonce": "form-nonce-0003"}).json()
    client.logout()
    client.login(username="bob", password=PASSWORD)

    response = client.post(f"/billing/topups/{intent['id']}/confirm/", {"token": "tok_123456"})

    assert response.status_code == 400
    assert response.json()["detail"] == "No such top-up."
