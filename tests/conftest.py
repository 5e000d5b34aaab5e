"""The whole suite's shared fixtures (tests/support/fixtures/) and the ledger invariant checked after every test."""

from __future__ import annotations

import pytest

from billing.services.ledger import audit_ledger

pytest_plugins = [
    "tests.support.fixtures.actors",
    "tests.support.fixtures.platform",
    "tests.support.fixtures.api_clients",
    "tests.support.fixtures.nodes",
    "tests.support.fixtures.spot",
    "tests.support.fixtures.model_files",
    "tests.support.fixtures.stripe",
]


def pytest_configure(config):
    """The translation catalogs compiled (as `make test` does), so a bare `pytest` sees the zh-hans pages too."""
    from portal.translations import compile_all

    compile_all()


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


@pytest.fixture(autouse=True)
def default_language_after_each_test():
    """A request leaves its language active in the thread (Django's LocaleMiddleware never deactivates): after
    a test that spoke zh-hans, the next test's direct service calls would otherwise answer in Chinese."""
    yield
    from django.utils import translation

    translation.deactivate()
