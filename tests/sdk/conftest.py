"""Fixtures of the SDK's tests only: the SDK and the CLI on the in-process stand-in of the API."""

from __future__ import annotations

import httpx
import pytest
from starverse.cli import common
from starverse.client import Client

from tests.support.sdk_api import FakeAPI


@pytest.fixture
def fake_api() -> FakeAPI:
    """The stand-in API (tests/support/sdk_api.py), recording what each request sent."""
    return FakeAPI()


@pytest.fixture
def fake_client(fake_api, monkeypatch) -> Client:
    """The SDK on the stand-in API; the CLI's commands use this client too."""
    made = Client("http://sv.test", "sv_x", transport=httpx.MockTransport(fake_api), backoff=0)
    monkeypatch.setattr(common, "client", lambda: made)
    monkeypatch.setenv("COLUMNS", "200")
    return made
