"""Sign-in: the lockout is per account and address and says when to retry; staff use the same door and
two-factor; sign-up doesn't reveal which e-mails are registered."""

from __future__ import annotations

import re
import time

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import SECRET_SESSION_KEY, format_hotp_value, hotp_value
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from billing.models import OperatorSettings
from portal.models import ApiToken
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db

User = get_user_model()
OFFICE, HOME = "203.0.113.7", "198.51.100.9"


@pytest.fixture(autouse=True)
def fresh_counters():
    """Lockout counters live in the cache; start each test from none."""
    cache.clear()
    yield
    cache.clear()


def from_address(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def log_in(client: Client, login: str, password: str):
    return client.post("/accounts/login/", {"login": login, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


# --- lockout: per account and address, 429 with Retry-After ---------------------------------------


def test_a_locked_out_login_page_answers_429_with_retry_after(alice):
    office = from_address(OFFICE)
    for _ in range(5):
        log_in(office, "alice", "wrong")

    response = log_in(office, "alice", PASSWORD)

    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 300
    assert "Too many failed login attempts" in response.content.decode()
    assert not signed_in(office)


def test_guessing_at_one_account_does_not_lock_out_others_at_the_same_address(alice, bob):
    office = from_address(OFFICE)
    for _ in range(12):  # past the per-address limit that used to lock the whole office out
        log_in(office, "alice", "wrong")

    colleague = from_address(OFFICE)
    response = log_in(colleague, "bob", PASSWORD)

    assert response.status_code == 302 and signed_in(colleague)


def test_the_same_account_still_signs_in_from_another_address(alice):
    for _ in range(5):
        log_in(from_address(OFFICE), "alice", "wrong")

    home = from_address(HOME)
    response = log_in(home, "alice", PASSWORD)

    assert response.status_code == 302 and signed_in(home)


def test_the_token_api_lockout_is_a_429_with_retry_after_and_shares_the_pages_count(alice):
    api = APIClient(REMOTE_ADDR=OFFICE)
    for _ in range(3):
        log_in(from_address(OFFICE), "alice", "wrong")
    for _ in range(2):
        assert api.post("/api/v1/tokens/", {"username": "alice", "password": "no"}, format="json").status_code == 401

    refused = api.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")

    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 300
    assert "Too many failed sign-in attempts" in refused.json()["detail"]
    assert not ApiToken.objects.exists()
    other_address = APIClient(REMOTE_ADDR=HOME)
    assert (
        other_address.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json").status_code
        == 201
    )


# --- staff: the admin's login goes through the same lockout, and two-factor -------------------------


def test_the_admin_login_form_is_not_a_way_around_the_lockout(operator):
    admin_form = from_address(OFFICE)

    response = admin_form.post("/admin/login/", {"username": "op", "password": PASSWORD})

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not signed_in(admin_form)


def test_twelve_wrong_operator_passwords_then_the_right_one_is_refused(operator):
    attacker = from_address(OFFICE)
    login_page = attacker.get("/admin/login/?next=/admin/")["Location"]
    for _ in range(12):
        attacker.post(login_page, {"login": "op", "password": "guess"})

    response = attacker.post(login_page, {"login": "op", "password": PASSWORD})

    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert not signed_in(attacker)
    assert attacker.get("/admin/").status_code == 302


def test_an_operator_signs_in_to_the_admin_through_the_site_login(operator):
    client = from_address(HOME)
    login_page = client.get("/admin/login/?next=/admin/")["Location"]

    response = client.post(login_page, {"login": "op", "password": PASSWORD})

    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_a_signed_in_user_who_is_not_staff_gets_403_at_the_admin_login(alice):
    client = from_address(HOME)
    client.force_login(alice)

    assert client.get("/admin/login/").status_code == 403


def totp_code(secret: str, offset: int = 0) -> str:
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30 + offset))


def activate_totp(client: Client) -> str:
    """Add an authenticator app on allauth's page, with the code an app would show; returns its secret."""
    client.post("/accounts/reauthenticate/", {"password": PASSWORD})  # adding one asks for the password again
    assert client.get("/accounts/2fa/totp/activate/").status_code == 200
    secret = client.session[SECRET_SESSION_KEY]
    response = client.post("/accounts/2fa/totp/activate/", {"code": totp_code(secret)})
    assert response.status_code == 302, response.content.decode()[:500]
    return secret


def test_staff_with_an_authenticator_sign_in_with_its_code(operator):
    setup = from_address(HOME)
    log_in(setup, "op", PASSWORD)
    secret = activate_totp(setup)
    assert Authenticator.objects.filter(user=operator, type=Authenticator.Type.TOTP).exists()

    client = from_address(HOME)
    after_password = log_in(client, "op", PASSWORD)
    assert after_password["Location"] == "/accounts/2fa/authenticate/"
    assert not signed_in(client)
    current = totp_code(secret)
    wrong = client.post("/accounts/2fa/authenticate/", {"code": f"{(int(current) + 1) % 1_000_000:06d}"})
    assert wrong.status_code == 200 and not signed_in(client)

    client.post("/accounts/2fa/authenticate/", {"code": totp_code(secret)})

    assert signed_in(client)
    assert client.get("/admin/").status_code == 200


def test_when_required_staff_without_an_authenticator_are_sent_to_set_one_up(operator):
    OperatorSettings.objects.update_or_create(pk=1, defaults={"staff_two_factor_required": True})
    client = from_address(HOME)
    log_in(client, "op", PASSWORD)

    response = client.get("/admin/billing/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/2fa/totp/activate/")
    activate_totp(client)
    assert client.get("/admin/").status_code == 200


def test_when_not_required_staff_open_the_admin_without_two_factor(operator):
    client = from_address(HOME)
    log_in(client, "op", PASSWORD)

    assert client.get("/admin/").status_code == 200


def test_the_requirement_is_an_operator_setting_in_the_admin(operator):
    client = from_address(HOME)
    client.force_login(operator)
    settings_page = client.get("/admin/billing/operatorsettings/1/change/")

    assert settings_page.status_code == 200
    assert 'name="staff_two_factor_required"' in settings_page.content.decode()


# --- sign-up: a registered e-mail looks like any other ----------------------------------------------


def sign_up(username: str, email: str):
    client = from_address(HOME)
    response = client.post(
        "/accounts/signup/",
        {"username": username, "email": email, "password1": PASSWORD, "password2": PASSWORD},
    )
    return client, response


def page_text(client: Client, response) -> str:
    html = client.get(response["Location"]).content.decode()
    return (
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
        .replace("carol@example.com", "EMAIL")
        .replace("alice@example.com", "EMAIL")
    )


def test_signing_up_with_a_registered_email_answers_exactly_like_a_new_one(alice, mailoutbox):
    new_client, new = sign_up("carol", "carol@example.com")
    taken_client, taken = sign_up("dave", "alice@example.com")

    assert (taken.status_code, taken["Location"]) == (new.status_code, new["Location"])
    assert page_text(taken_client, taken) == page_text(new_client, new)
    assert not User.objects.filter(username="dave").exists()
    assert not signed_in(taken_client) and not signed_in(new_client)
    assert sorted(mail.to[0] for mail in mailoutbox) == ["alice@example.com", "carol@example.com"]


def test_a_new_account_signs_in_once_its_email_is_confirmed(mailoutbox):
    client, _ = sign_up("carol", "carol@example.com")
    link = re.search(r"https?://\S+/accounts/confirm-email/\S+/", mailoutbox[0].body)[0]

    client.post(link.split("testserver", 1)[1])

    assert EmailAddress.objects.get(email="carol@example.com").verified
    assert signed_in(client)
