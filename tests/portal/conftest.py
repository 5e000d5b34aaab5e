"""Fixtures of the portal's page tests: no scheduling behind a launch, a store of the test's own, and alice
signed in with credit."""

from __future__ import annotations

import pytest

from tests.support.stored import own_store_url


@pytest.fixture
def no_scheduling(monkeypatch):
    """A launch queues its job without the scheduler placing it."""
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)


@pytest.fixture
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def alice_client(client, alice, fund):
    """Alice signed in, with the credit a launch needs to hold a few minutes of its plan."""
    fund(alice)
    client.force_login(alice)
    return client
