"""REST API v1: tokens, account, ledger, catalog and the schema."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from base.tokens import hash_token
from billing.services.credits import grant_trial_credit
from billing.services.pricing import current_offers, reference_chip
from kernel.money import format_amount
from portal.models import ApiToken, TokenScope
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def api_client():
    return APIClient()


def bearer(api_client: APIClient, raw: str) -> APIClient:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api_client


def test_a_token_is_returned_once_and_stored_only_as_its_hash(api_client, alice):
    response = api_client.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")
    assert response.status_code == 201
    raw = response.json()["token"]
    token = ApiToken.objects.get(user=alice)
    assert token.token_hash == hash_token(raw)
    assert raw not in {token.token_hash, token.prefix}
    listed = bearer(api_client, raw).get("/api/v1/tokens/").json()["results"]
    assert [item["prefix"] for item in listed] == [token.prefix]
    assert "token" not in listed[0]


def test_a_new_token_expires_in_90_days_unless_asked_otherwise(api_client, alice):
    def expires(**body):
        response = api_client.post(
            "/api/v1/tokens/", {"username": "alice", "password": PASSWORD, **body}, format="json"
        )
        assert response.status_code == 201, response.json()
        return ApiToken.objects.get(pk=response.json()["id"]).expires_at

    days = expires() - timezone.now()
    assert timedelta(days=89, hours=23) < days <= timedelta(days=90)
    assert timedelta(days=6) < expires(expires_in_days=7) - timezone.now() <= timedelta(days=7)
    assert expires(expires_in_days=None) is None


def test_a_token_can_be_had_with_the_email_address_too(api_client, alice):
    response = api_client.post(
        "/api/v1/tokens/", {"username": "alice@example.com", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 201


def test_a_wrong_password_gets_401_and_no_token(api_client, alice):
    response = api_client.post("/api/v1/tokens/", {"username": "alice", "password": "nope"}, format="json")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid username or password."}
    assert not ApiToken.objects.exists()


def test_a_missing_field_is_named_in_the_error(api_client):
    response = api_client.post("/api/v1/tokens/", {"username": "alice"}, format="json")
    assert response.status_code == 400
    assert "password" in response.json()["errors"]


def test_malformed_json_is_a_clear_400(api_client):
    response = api_client.post("/api/v1/tokens/", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_the_account_shows_the_balance_as_a_decimal_string(api_client, alice):
    grant_trial_credit(alice)
    _, raw = ApiToken.issue(alice)
    response = bearer(api_client, raw).get("/api/v1/account/")
    assert response.status_code == 200
    assert response.json() == {
        "username": "alice",
        "email": "alice@example.com",
        "balance": "10.00",
        "currency": "CNY",
    }


@pytest.mark.parametrize("header", ["Bearer sv_wrong", "Bearer", "Bearer a b", "Token abc"])
def test_a_wrong_or_malformed_token_is_401(api_client, header):
    api_client.credentials(HTTP_AUTHORIZATION=header)
    response = api_client.get("/api/v1/account/")
    assert response.status_code == 401
    assert response.json()["detail"]


def test_a_revoked_token_is_401(api_client, alice):
    token, raw = ApiToken.issue(alice)
    token.revoke()
    response = bearer(api_client, raw).get("/api/v1/account/")
    assert response.status_code == 401
    assert response.json() == {"detail": "This API token has been revoked."}


def test_an_expired_token_is_401(api_client, alice):
    _, raw = ApiToken.issue(alice, expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(api_client, raw).get("/api/v1/account/").status_code == 401


def test_revoking_through_the_api_stops_the_token_at_once(api_client, alice):
    token, raw = ApiToken.issue(alice)
    assert bearer(api_client, raw).delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    assert bearer(api_client, raw).get("/api/v1/account/").status_code == 401


def test_a_user_cannot_see_or_revoke_another_users_token(api_client, alice, bob):
    bobs, _ = ApiToken.issue(bob)
    _, raw = ApiToken.issue(alice)
    assert bearer(api_client, raw).delete(f"/api/v1/tokens/{bobs.pk}/").status_code == 404
    assert bobs.prefix not in str(bearer(api_client, raw).get("/api/v1/tokens/").json())
    bobs.refresh_from_db()
    assert bobs.revoked_at is None


def test_a_read_only_token_reads_but_cannot_write(api_client, alice):
    token, raw = ApiToken.issue(alice, scope=TokenScope.READ_ONLY)
    assert bearer(api_client, raw).get("/api/v1/account/").status_code == 200
    response = bearer(api_client, raw).delete(f"/api/v1/tokens/{token.pk}/")
    assert response.status_code == 403
    assert response.json() == {"detail": "This API token is read-only."}


def test_no_credentials_is_401_not_403(api_client):
    response = api_client.get("/api/v1/account/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_the_ledger_lists_only_the_users_own_entries_paginated(api_client, alice, bob):
    grant_trial_credit(alice)
    grant_trial_credit(bob)
    _, raw = ApiToken.issue(alice)
    body = bearer(api_client, raw).get("/api/v1/ledger/").json()
    assert body["count"] == 1
    entry = body["results"][0]
    assert entry["amount"] == "10.00"
    assert entry["kind"] == "trial_credit"
    assert "next" in body and "previous" in body


def test_chips_list_every_type_with_specs_and_current_prices(api_client, catalog):
    body = api_client.get("/api/v1/chips/").json()
    by_slug = {chip["slug"]: chip for chip in body}
    assert set(by_slug) == {"rtx-4090", "a100-80g", "h100-80g", "tpu-v4", "tpu-v5e", "ascend-910b", "mlu370"}
    assert by_slug["rtx-4090"]["on_demand_price"] == "1.20"
    assert by_slug["rtx-4090"]["spot_price"] == "0.50"
    assert by_slug["tpu-v5e"]["on_demand_price"] == "2.80"
    assert by_slug["ascend-910b"]["spot_price"] == "0.60"
    assert by_slug["h100-80g"]["memory_gib"] == 80
    offers = current_offers()
    tpu = next(offer for offer in offers if offer.chip.slug == "tpu-v5e")
    expected = format_amount(tpu.per_work_unit(tpu.on_demand_per_hour, reference_chip(offers)))
    assert by_slug["tpu-v5e"]["on_demand_price_per_work_unit"] == expected
    assert by_slug["rtx-4090"]["on_demand_price_per_work_unit"] == "1.20"


def test_pools_show_chip_counts_and_what_is_simulated(api_client, catalog):
    pools = api_client.get("/api/v1/pools/").json()["results"]
    assert len(pools) == 7
    pool = next(p for p in pools if p["chip_type"] == "rtx-4090")
    assert pool["chips"] == 16
    assert pool["simulated_chips"] == 16


def test_the_schema_and_docs_are_served_without_login(api_client):
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in [
        "/api/v1/chips/",
        "/api/v1/pools/",
        "/api/v1/account/",
        "/api/v1/ledger/",
        "/api/v1/tokens/",
    ]:
        assert path in paths
    docs = api_client.get("/api/v1/docs/")
    assert docs.status_code == 200
    assert b"/static/drf_spectacular_sidecar/" in docs.content


def test_the_public_docs_list_no_agent_endpoint_and_link_back_to_the_site(api_client):
    paths = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    docs = api_client.get("/api/v1/docs/").content.decode()

    assert "/api/v1/jobs/" in paths
    assert not [path for path in paths if path.startswith("/api/v1/agent/")]
    bar = docs[docs.index('data-testid="site-bar"') : docs.index("</nav>")]
    for link in ['href="/"', 'href="/dashboard/"', 'href="/dashboard/tokens/"']:
        assert link in bar
