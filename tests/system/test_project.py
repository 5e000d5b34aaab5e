"""Project hygiene that CI checks on every run: migrations, system checks, the seed, the Celery app."""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys

import pytest
from django.core.management import call_command

from billing.models import Price
from fleet.models import ChipType, Node, Pool
from portal.celery import app


@pytest.mark.django_db
def test_models_and_migrations_agree():
    call_command("makemigrations", "--check", "--dry-run", stdout=io.StringIO())


def test_system_checks_pass():
    call_command("check", stdout=io.StringIO())


def test_deploy_checks_pass_with_production_settings():
    unsafe_for_browser_tests = {"DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {
        **{key: value for key, value in os.environ.items() if key not in unsafe_for_browser_tests},
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "SECURE_HTTPS": "true",
        "DEBUG": "false",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_seeding_twice_creates_nothing_the_second_time():
    call_command("seed_catalog", stdout=io.StringIO())
    counts = (ChipType.objects.count(), Price.objects.count(), Pool.objects.count(), Node.objects.count())
    out = io.StringIO()
    call_command("seed_catalog", stdout=out)
    assert (
        ChipType.objects.count(),
        Price.objects.count(),
        Pool.objects.count(),
        Node.objects.count(),
    ) == counts
    assert counts[0] == 7
    assert "already seeded" in out.getvalue()


@pytest.mark.django_db
def test_the_article_prices_are_seeded():
    call_command("seed_catalog", stdout=io.StringIO())
    prices = {p.chip_type.slug: (p.on_demand_per_hour, p.spot_floor_per_hour) for p in Price.objects.in_force()}
    assert prices["rtx-4090"] == (1_200_000, 500_000)
    assert prices["tpu-v5e"] == (2_800_000, 800_000)
    assert prices["ascend-910b"] == (1_500_000, 600_000)


@pytest.mark.django_db
def test_the_operator_login_is_created_once_and_shown_once(settings, tmp_path):
    settings.DATA_DIR = tmp_path  # output that is not a terminal gets the password in a file there
    first, second = io.StringIO(), io.StringIO()
    call_command("ensure_operator", stdout=first)
    call_command("ensure_operator", stdout=second)
    assert "Operator login" in first.getvalue()
    assert second.getvalue() == ""


def test_the_celery_app_knows_the_periodic_tasks():
    app.loader.import_default_modules()
    assert "billing.tasks.audit_ledger" in app.tasks
    assert any(entry["task"] == "billing.tasks.audit_ledger" for entry in app.conf.beat_schedule.values())


HSTS_HEADER = """
import django
django.setup()
from django.http import HttpResponse
from django.middleware.security import SecurityMiddleware
from django.test import RequestFactory
request = RequestFactory().get("/", secure=True)
print(SecurityMiddleware(lambda request: HttpResponse())(request)["Strict-Transport-Security"])
"""


def hsts_header(**variables: str) -> str:
    """The Strict-Transport-Security header production settings send with these environment variables."""
    env = {**os.environ, "DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "SECURE_HTTPS": "true", **variables}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    result = subprocess.run(
        [sys.executable, "-c", HSTS_HEADER], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.strip()


def test_hsts_does_not_ask_browsers_to_preload_the_domain_unless_the_operator_turns_it_on():
    # Preloading is hard to undo (browsers ship the list): it is the operator's decision, never a default.
    assert hsts_header() == "max-age=31536000; includeSubDomains"
    assert hsts_header(SECURE_HSTS_PRELOAD="true") == "max-age=31536000; includeSubDomains; preload"
