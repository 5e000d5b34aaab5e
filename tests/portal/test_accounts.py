"""Sign-up in the browser flow (Django test client): the trial credit once the e-mail is confirmed, confirming
signs you in, the mail and the "verify your e-mail" page, clear errors for bad input."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from billing.models import OperatorSettings, Transaction
from billing.services.ledger import balance_of
from kernel.money import to_micros
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db

User = get_user_model()


def sign_up(client, username="carol", email="carol@example.com", password=PASSWORD, password2=None):
    return client.post(
        "/accounts/signup/",
        {"username": username, "email": email, "password1": password, "password2": password2 or password},
    )


@pytest.fixture(autouse=True)
def fresh_counters():
    """allauth's per-address cooldown on confirmation mails lives in the cache; start each test from none."""
    cache.clear()
    yield
    cache.clear()


def confirmation_path(mail) -> str:
    link = re.search(r"https?://\S+/accounts/confirm-email/\S+/", mail.body)[0]
    return "/accounts/" + link.split("/accounts/", 1)[1]


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_signing_up_grants_no_credit_until_the_email_is_confirmed(client):
    response = sign_up(client)
    assert response.status_code == 302
    assert balance_of(User.objects.get(username="carol")) == 0
    assert not Transaction.objects.exists()


def test_confirming_the_email_grants_the_trial_credit_once_as_a_ledger_transaction(client, mailoutbox):
    sign_up(client)
    client.post(confirmation_path(mailoutbox[0]))
    client.post("/accounts/email/", {"email": "carol@work.example.com", "action_add": ""})  # a second address
    client.post(confirmation_path(mailoutbox[-1]))

    carol = User.objects.get(username="carol")
    assert EmailAddress.objects.filter(user=carol, verified=True).count() == 2
    assert balance_of(carol) == 10_000_000
    assert Transaction.objects.filter(idempotency_key=f"trial-credit:{carol.pk}").count() == 1


def test_with_email_verification_off_sign_up_grants_the_credit(client, settings):
    settings.ACCOUNT_EMAIL_VERIFICATION = "none"  # nothing will ever be confirmed: the operator trusts sign-up

    sign_up(client)

    assert balance_of(User.objects.get(username="carol")) == 10_000_000


def test_the_trial_credit_follows_the_operator_setting(client, mailoutbox):
    settings = OperatorSettings.load()
    settings.trial_credit = to_micros("25")
    settings.save()
    sign_up(client)
    client.post(confirmation_path(mailoutbox[0]))
    assert balance_of(User.objects.get(username="carol")) == 25_000_000


def test_confirming_in_another_browser_signs_you_in(client, mailoutbox):
    sign_up(client)
    mail_app = Client()  # the link opened from a mail app: a browser without the sign-up's session

    response = mail_app.post(confirmation_path(mailoutbox[0]))

    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    assert signed_in(mail_app)
    assert "¥10.00" in mail_app.get("/dashboard/").content.decode()


def test_a_used_confirmation_link_signs_nobody_in(client, mailoutbox):
    sign_up(client)
    path = confirmation_path(mailoutbox[0])
    Client().post(path)

    later = Client()
    response = later.post(path)

    assert response.status_code == 404
    assert not signed_in(later)


def test_the_confirmation_mail_names_starverse_not_the_host(client, mailoutbox):
    sign_up(client)

    (mail,) = mailoutbox
    assert mail.subject == "[Starverse] Please Confirm Your Email Address"
    first_lines = mail.body.split("http", 1)[0]
    assert "Hello from Starverse!" in first_lines and "signed up for Starverse as carol" in first_lines
    assert "testserver" not in first_lines


def test_the_verify_page_says_the_trial_credit_waits_for_the_confirmation(client):
    page = client.get(sign_up(client)["Location"]).content.decode()

    assert "Confirm your e-mail address" in page
    assert re.search(r"¥10\.00 trial credit</strong>, which waits here until then", page)


def test_the_verify_page_sends_the_link_again_after_allauths_cooldown(client, mailoutbox):
    sign_up(client)
    now = timezone.now()

    too_soon = client.post("/accounts/confirm-email/", follow=True)
    assert len(mailoutbox) == 1
    assert "A link went to your address a moment ago" in too_soon.content.decode()
    with time_machine.travel(now + timedelta(minutes=4), tick=False):
        again = client.post("/accounts/confirm-email/", follow=True)

    assert len(mailoutbox) == 2 and mailoutbox[1].to == ["carol@example.com"]
    assert "Confirmation email sent to carol@example.com" in again.content.decode()
    client.post(confirmation_path(mailoutbox[1]))
    assert signed_in(client)


def test_the_verify_page_without_a_sign_up_in_progress_sends_you_to_sign_in(client, mailoutbox):
    response = client.post("/accounts/confirm-email/")

    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "Sign in" in client.get("/accounts/confirm-email/").content.decode()
    assert not mailoutbox


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


def test_a_password_error_sits_under_its_field(client):
    html = sign_up(client, password="12345678").content.decode()

    field = html.index('id="id_password1"')
    error = html.index("This password is too common.")
    next_label = html.index('<label for="id_password2"')
    assert field < error < next_label  # under its input, not above its label


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
