"""Sign-up in the browser flow (Django test client): trial credit once, clear errors for bad input."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from base.money import to_micros
from billing.models import OperatorSettings, Transaction
from billing.services.ledger import balance_of
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

User = get_user_model()


def sign_up(client, username="carol", email="carol@example.com", password=PASSWORD, password2=None):
    return client.post(
        "/accounts/signup/",
        {"username": username, "email": email, "password1": password, "password2": password2 or password},
    )


def test_signing_up_grants_the_trial_credit_as_a_ledger_transaction(client):
    response = sign_up(client)
    assert response.status_code == 302
    carol = User.objects.get(username="carol")
    assert balance_of(carol) == 10_000_000
    assert Transaction.objects.filter(idempotency_key=f"trial-credit:{carol.pk}").count() == 1


def test_the_trial_credit_follows_the_operator_setting(client):
    settings = OperatorSettings.load()
    settings.trial_credit = to_micros("25")
    settings.save()
    sign_up(client)
    assert balance_of(User.objects.get(username="carol")) == 25_000_000


def test_a_taken_email_makes_no_account_and_is_not_revealed(client, alice):
    response = sign_up(client, email="alice@example.com")
    assert response.status_code == 302 and response["Location"] == "/accounts/confirm-email/"
    assert b"already registered" not in client.get(response["Location"]).content
    assert not User.objects.filter(username="carol").exists()


def test_a_weak_password_is_refused_with_a_message(client):
    response = sign_up(client, password="12345678")
    assert response.status_code == 200
    assert b"too common" in response.content or b"entirely numeric" in response.content
    assert not User.objects.filter(username="carol").exists()
    assert not Transaction.objects.exists()


def test_a_user_can_log_in_and_out(client, alice):
    response = client.post("/accounts/login/", {"login": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/dashboard/").status_code == 200
    client.post("/accounts/logout/")
    assert client.get("/dashboard/").status_code == 302


def test_password_reset_sends_a_mail(client, alice, mailoutbox):
    response = client.post("/accounts/password/reset/", {"email": "alice@example.com"})
    assert response.status_code == 302
    assert len(mailoutbox) == 1
    assert "alice@example.com" in mailoutbox[0].to
