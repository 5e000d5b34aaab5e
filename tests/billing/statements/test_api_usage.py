"""GET /api/v1/usage/: grouped, owner-scoped, money as decimal strings."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import include, path
from rest_framework.test import APIClient

from portal.models import ApiToken
from tests.support.statements import seed_march

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.billing.statements.test_api_usage")]

# Until portal/api/urls.py includes portal.api.usage, route it here in front of the project's URLs.
urlpatterns = [path("api/v1/", include("portal.api.usage")), path("", include("portal.urls"))]

MARCH = {"since": "2026-03-01", "until": "2026-03-31"}


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


def api_for(user) -> APIClient:
    _, raw = ApiToken.issue(user, name="test")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


@pytest.mark.parametrize("group", ["job", "chip", "day"])
def test_usage_rows_sum_to_the_total_as_decimal_strings(march, alice, group):
    response = api_for(alice).get("/api/v1/usage/", {**MARCH, "group": group})
    assert response.status_code == 200
    body = response.json()
    assert body["total"] == "7.05"
    assert sum(Decimal(row["amount"]) for row in body["rows"]) == Decimal("7.05")
    assert all(isinstance(row["amount"], str) for row in body["rows"])


def test_usage_by_day_splits_by_the_day_a_charge_ended(march, alice):
    body = api_for(alice).get("/api/v1/usage/", {**MARCH, "group": "day"}).json()
    assert [(row["key"], row["amount"]) for row in body["rows"]] == [("2026-03-10", "2.40"), ("2026-03-11", "4.65")]


def test_usage_is_scoped_to_its_owner(march, alice, bob):
    body = api_for(bob).get("/api/v1/usage/", {"group": "job"}).json()
    assert [(row["key"], row["amount"]) for row in body["rows"]] == [(str(march["secret"].pk), "9.80")]
    assert body["total"] == "9.80"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group": "planet"}, "group"),
        ({"since": "2026-03-31", "until": "2026-03-01"}, "since"),
        ({"since": "2026-13-01"}, "since"),
        ({"since": "9999-12-31"}, "since"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_field(march, alice, params, field):
    response = api_for(alice).get("/api/v1/usage/", params)
    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_usage_needs_a_token(client):
    assert APIClient().get("/api/v1/usage/").status_code == 401
