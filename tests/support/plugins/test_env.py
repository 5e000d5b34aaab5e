"""Environment defaults for the test run, applied before Django loads its settings."""

from __future__ import annotations

import os
import secrets

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    # Settings refuse to load without a key; one per run, inherited by the servers, Celery workers and
    # management commands the tests start.
    os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-" + secrets.token_urlsafe(32))
    os.environ.setdefault("STATIC_NO_MANIFEST", "1")  # tests don't run collectstatic
    os.environ.setdefault("THROTTLE_TOKEN_CREATE", "1000/min")
    # Passwords hashed in a blink (MD5), here and in every server and worker the tests start: with PBKDF2
    # each user a fixture makes, and each password sign-in, costs ~0.3 s.
    os.environ.setdefault("TESTS_HASH_PASSWORDS_FAST", "1")
    # Tests read the chip list right after changing prices and capacity: no per-process copy.
    os.environ.setdefault("API_CHIPS_CACHE_SECONDS", "0")
    os.environ.setdefault("CACHE_KEY_PREFIX", f"starverse-test-{os.getpid()}")
