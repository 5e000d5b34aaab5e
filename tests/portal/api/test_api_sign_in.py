"""The token API makes every check the login page makes (docs/RELIABILITY.md #35): an account whose e-mail is not
confirmed gets no token and its tokens don't work; an account with two-factor needs its code; wrong codes lock out."""

from __future__ import annotations

import pytest
import time_machine
from allauth.account.models import EmailAddress
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ApiToken
from tests.support.accounts import PASSWORD, token_client
from tests.support.jobs import JOB_SPEC
from tests.support.two_factor import totp_code, turn_on_totp, wrong_code

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters():
    """Lockout counters and used codes live in the cache; start each test from none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def carol(django_user_model):
    """Signed up, her confirmation mail unopened."""
    user = django_user_model.objects.create_user(username="carol", email="carol@example.com", password=PASSWORD)
    EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=False)
    return user


@pytest.fixture
def frozen():
    """A stopped clock, so that a TOTP code is still the current one when the request checks it."""
    with time_machine.travel(timezone.now(), tick=False):
        yield


def create_token(**body):
    return APIClient().post("/api/v1/tokens/", {"password": PASSWORD, **body}, format="json")


# --- a confirmed e-mail ---------------------------------------------------------------------------


def test_an_unconfirmed_account_gets_no_token(carol):
    response = create_token(username="carol")

    assert response.status_code == 401
    assert response.json()["code"] == "email_unconfirmed"
    assert response.json()["detail"].startswith("Confirm your e-mail address first")
    assert not ApiToken.objects.exists()


def test_a_token_of_an_unconfirmed_account_works_for_no_call(carol, catalog):
    api = token_client(carol)  # made before the check existed, or by an operator

    account = api.get("/api/v1/account/")
    launch = api.post("/api/v1/jobs/", JOB_SPEC, format="json")

    assert account.status_code == launch.status_code == 401
    assert account.json()["code"] == launch.json()["code"] == "email_unconfirmed"
    assert not carol.jobs.exists()


def test_confirming_the_address_makes_its_tokens_work_at_once(carol):
    api = token_client(carol)
    assert api.get("/api/v1/account/").status_code == 401

    EmailAddress.objects.filter(user=carol).update(verified=True)

    assert api.get("/api/v1/account/").status_code == 200


def test_unconfirming_an_address_in_the_admin_stops_a_cached_token(alice):
    api = token_client(alice)
    assert api.get("/api/v1/account/").status_code == 200  # now in the lookup cache
    address = EmailAddress.objects.get(user=alice)
    address.verified = False
    address.save()

    assert api.get("/api/v1/account/").status_code == 401


# --- two-factor -------------------------------------------------------------------------------------


def test_a_two_factor_account_gets_no_token_with_the_password_alone(alice):
    turn_on_totp(alice)

    response = create_token(username="alice")

    assert response.status_code == 401
    assert response.json()["code"] == "two_factor_required"
    assert "`otp`" in response.json()["detail"]
    assert not ApiToken.objects.exists()


def test_a_two_factor_account_gets_a_token_with_its_code(alice, frozen):
    secret = turn_on_totp(alice)

    response = create_token(username="alice", otp=totp_code(secret))

    assert response.status_code == 201
    assert ApiToken.objects.get(user=alice).prefix == response.json()["prefix"]


def test_a_wrong_or_reused_code_gets_no_token(alice, frozen):
    secret = turn_on_totp(alice)
    assert create_token(username="alice", otp=totp_code(secret)).status_code == 201

    wrong = create_token(username="alice", otp=wrong_code(secret))
    reused = create_token(username="alice", otp=totp_code(secret))

    assert wrong.status_code == reused.status_code == 401
    assert wrong.json()["code"] == reused.json()["code"] == "two_factor_invalid"
    assert ApiToken.objects.count() == 1


def test_five_wrong_codes_lock_the_api_out_like_the_login_page(alice, frozen):
    secret = turn_on_totp(alice)
    for _ in range(5):
        assert create_token(username="alice", otp=wrong_code(secret)).status_code == 401

    refused = create_token(username="alice", otp=totp_code(secret))

    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 300
    assert "Too many wrong two-factor codes" in refused.json()["detail"]
    assert not ApiToken.objects.exists()
