"""Shared actors (alice, bob, an operator) and the ledger invariant checked after every test."""

from __future__ import annotations

import io

import pytest
from allauth.account.models import EmailAddress
from django.core.management import call_command

from billing.services.ledger import audit_ledger

PASSWORD = "correct-horse-battery-staple"

# A small job spec the API accepts, for tests that submit or quote one.
JOB_SPEC = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "per_device_batch_size": 4,
    "max_steps": 100,
    "policy": "cost-performance",
    "max_budget": "28",
}


def token_client(user, **issue):
    """An API client for `user` with a fresh token (`issue`: ApiToken.issue's scope, expires_at...)."""
    from rest_framework.test import APIClient

    from portal.models import ApiToken

    _, raw = ApiToken.issue(user, **issue)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def _uses_database(item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(
        {"db", "transactional_db", "live_server"} & set(getattr(item, "fixturenames", ()))
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After every test that touched the database, the ledger still balances (docs/RELIABILITY.md #1)."""
    result = yield
    if _uses_database(item):
        problems = audit_ledger()
        assert not problems, f"ledger out of balance after the test: {problems}"
    return result


@pytest.fixture
def make_user(django_user_model):
    """A user whose e-mail is verified, as after sign-up and the confirmation link (sign-in needs that)."""

    def make(username: str, **extra):
        user = django_user_model.objects.create_user(
            username=username, email=f"{username}@example.com", password=PASSWORD, **extra
        )
        EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=True)
        return user

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def bob(make_user):
    return make_user("bob")


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_superuser(username="op", email="op@example.com", password=PASSWORD)
    EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=True)
    return user


@pytest.fixture
def catalog(db):
    call_command("seed_catalog", stdout=io.StringIO())


@pytest.fixture
def fund():
    """Give a user credit through the ledger (an operator adjustment), as a top-up would."""
    from billing.services.credits import adjust_credit
    from kernel.money import to_micros

    def give(user, amount: str = "100") -> None:
        adjust_credit(user, to_micros(amount), reason="test funds", actor=None, key=f"test-funds:{user.pk}:{amount}")

    return give


@pytest.fixture
def no_celery(monkeypatch):
    """Jobs stay queued: the ids the API asked Celery to schedule are collected instead."""
    queued = []
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: queued.append(job_id))
    return queued


@pytest.fixture
def tasks_run_inline(monkeypatch):
    """Celery's follow-up tasks (clear the market, schedule a job) run at once, in order, in the caller."""
    from market.tasks import clear_market
    from workers.services.scheduling import schedule

    monkeypatch.setattr("market.tasks.clear_market.delay", lambda chip_type_id=None: clear_market(chip_type_id))
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: schedule(job_id))
