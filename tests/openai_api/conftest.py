"""The official `openai` client against the /v1/ routes, in process: its HTTP goes through httpx's WSGI
transport into Django's handler, inside the test's transaction (no server, no flush)."""

from __future__ import annotations

import httpx2
import openai
import pytest
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections

BASE_URL = "http://testserver/v1"


@pytest.fixture
def wsgi_transport():
    """Django's WSGI handler, kept from closing the test's connection after each request (as Django's test
    client does)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield httpx2.WSGITransport(app=get_wsgi_application())
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def openai_for(token_for, wsgi_transport):
    """The official client for a user (`token_for`'s kinds of token), or with a raw api_key."""

    def make(user=None, *, api_key: str | None = None, **kinds) -> openai.OpenAI:
        key = api_key if api_key is not None else token_for(user, **kinds)
        http = httpx2.Client(transport=wsgi_transport, base_url=BASE_URL)
        return openai.OpenAI(base_url=BASE_URL, api_key=key, http_client=http, max_retries=0)

    return make


@pytest.fixture
def raw_for(token_for, wsgi_transport):
    """A plain HTTP client with a user's token, for what the openai client doesn't send."""

    def make(user) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {token_for(user)}"}
        return httpx2.Client(transport=wsgi_transport, base_url=BASE_URL, headers=headers)

    return make
