"""Every route's refusals in Chinese (#33): the crafted requests of tests/portal/test_fuzz_every_endpoint.py, sent
with Accept-Language zh-CN, signed in and not. Every `detail` and per-field message of an API error, and every
visible text of a page answered, must hold Chinese (or be names, numbers and units: visible_text.py).

The agents' protocol, Stripe's webhook and the OpenAI-compatible gateway answer machines, and stay English
(docs/I18N.md); the crafted values themselves may be echoed back inside a Chinese message.
"""

# ruff: noqa: F811 (the fixtures imported from the fuzz test are this test's arguments)

from __future__ import annotations

import pytest
from django.test import Client
from hypothesis import given

from tests.portal.i18n.visible_text import needs_translation, untranslated
from tests.portal.test_fuzz_every_endpoint import (  # noqa: F401 (fixtures)
    EXAMPLES,
    crafted_request,
    generous_limits,
    routes,
    send,
    world,
)
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

FOR_MACHINES = ("/api/v1/agent/", "/stripe/", "/v1/")
OWN_NAMES = ("alice", "alice@example.com", "mine")


def messages_of(body) -> list[str]:
    if not isinstance(body, dict):
        return []
    found = [str(body.get("detail", ""))]
    for messages in (body.get("errors") or {}).values():
        found += [str(message) for message in (messages if isinstance(messages, list) else [messages])]
    return found


def english_in(response) -> list[str]:
    content_type = response.get("Content-Type", "")
    if content_type.startswith("application/json") and response.status_code >= 400:
        return [text for text in messages_of(response.json()) if needs_translation(text, OWN_NAMES)]
    if content_type.startswith("text/html") and not getattr(response, "streaming", False):
        return untranslated(response.content.decode(errors="replace"), OWN_NAMES)
    return []


def test_every_refusal_and_page_a_chinese_request_gets_is_in_chinese(world, alice, generous_limits):
    clients = {"none": Client(HTTP_ACCEPT_LANGUAGE="zh-CN"), "session": Client(HTTP_ACCEPT_LANGUAGE="zh-CN")}
    clients["session"].login(username=alice.username, password=PASSWORD)
    english: dict[str, set[str]] = {}
    checked = 0
    for route in routes():
        if route.template.startswith(FOR_MACHINES):
            continue

        @EXAMPLES
        @given(request=crafted_request(route, world))
        def throw(request):
            response = send(request, world, clients)
            for text in english_in(response):
                english.setdefault(f"{request['method']} {request['url']}", set()).add(f"{response.status_code} {text}")

        throw()
        checked += 1
    assert checked >= 50, checked
    assert english == {}
