"""Every page carries a Content-Security-Policy that runs no inline script; the billing page alone adds
Stripe.js, from the origin the platform is configured with."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.support.deployment_pages import make_deployment
from tests.support.statements import seed_march

pytestmark = pytest.mark.django_db

PAGES = [
    "/",
    "/pricing/",
    "/accounts/login/",
    "/accounts/signup/",
    "/accounts/password/reset/",
    "/dashboard/",
    "/dashboard/tokens/",
    "/train/",
    "/datasets/",
    "/jobs/",
    "/jobs/{job}/",
    "/deployments/",
    "/deployments/new/",
    "/deployments/{deployment}/",
    "/deployments/{deployment}/playground/",
    "/bids/",
    "/billing/",
    "/billing/usage/",
    "/billing/statements/",
    "/billing/statements/2026-03/",
]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)
LOCALSTRIPE = "http://127.0.0.1:8420"


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {name: sources for name, *sources in (part.split() for part in header.split(";") if part.strip())}


@pytest.fixture
def alice_signed_in(catalog, alice, bob) -> tuple[Client, dict]:
    march = seed_march(alice, bob)
    deployment = make_deployment(alice)
    client = Client()
    client.force_login(alice)
    return client, {"job": march["alpha"].pk, "deployment": deployment.pk}


@pytest.fixture
def stripe_at_localstripe(settings):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_PUBLISHABLE_KEY = "sk_test_x", "pk_test_x"
    settings.STRIPE_API_BASE, settings.STRIPE_JS_URL = LOCALSTRIPE, f"{LOCALSTRIPE}/js.stripe.com/v3/"


@pytest.mark.parametrize("page", PAGES)
def test_a_page_carries_a_policy_that_runs_only_our_own_scripts(alice_signed_in, stripe_at_localstripe, page):
    client, ids = alice_signed_in
    if page.startswith("/accounts/"):
        client = Client()  # signed-in visitors are sent on from the sign-in pages

    response = client.get(page.format(**ids))

    assert response.status_code == 200
    directives = policy(response)
    assert "'unsafe-inline'" not in directives["script-src"] and "'unsafe-eval'" not in directives["script-src"]
    assert directives["style-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"]
    html = response.content.decode()
    assert not INLINE_SCRIPT.search(html), INLINE_SCRIPT.search(html)[0]
    assert not INLINE_HANDLER.search(html), INLINE_HANDLER.search(html)[0]


def test_the_billing_page_alone_may_load_stripe_js_from_the_configured_origin(alice_signed_in, stripe_at_localstripe):
    client, _ = alice_signed_in

    billing = policy(client.get("/billing/"))
    pricing = policy(client.get("/pricing/"))

    assert LOCALSTRIPE in billing["script-src"] and LOCALSTRIPE in billing["connect-src"]
    assert LOCALSTRIPE in billing["frame-src"]
    assert all(LOCALSTRIPE not in sources for sources in pricing.values())


def test_stripes_own_js_is_allowed_with_its_frames_and_api(alice_signed_in, settings):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_PUBLISHABLE_KEY = "sk_test_x", "pk_test_x"
    settings.STRIPE_API_BASE, settings.STRIPE_JS_URL = "https://api.stripe.com", "https://js.stripe.com/v3/"
    client, _ = alice_signed_in

    billing = policy(client.get("/billing/"))

    assert "https://js.stripe.com" in billing["script-src"]
    assert "https://hooks.stripe.com" in billing["frame-src"]
    assert "https://api.stripe.com" in billing["connect-src"]


def test_the_admin_and_the_api_docs_carry_the_policy_too(operator):
    client = Client()
    client.force_login(operator)

    admin = client.get("/admin/")
    docs = client.get("/api/v1/docs/")

    assert admin.status_code == 200 and "'unsafe-inline'" not in policy(admin)["script-src"]
    assert docs.status_code == 200 and "'unsafe-inline'" not in policy(docs)["script-src"]
    assert not INLINE_SCRIPT.search(docs.content.decode())
