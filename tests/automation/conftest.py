"""Fixtures for the automation tests: API clients with tokens of every kind, a small enrolled fleet."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import Pool
from portal.models import ApiToken, TokenScope
from workers.models import EnrollmentToken
from workers.services.enrollment import enroll_node


def client_with(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


@pytest.fixture
def token_for():
    """A raw API token for a user: read-write by default, or read-only, or already expired."""

    def make(user, *, scope: str = TokenScope.READ_WRITE, expired: bool = False) -> str:
        expires_at = timezone.now() - timedelta(minutes=1) if expired else None
        _, raw = ApiToken.issue(user, scope=scope, expires_at=expires_at)
        return raw

    return make


@pytest.fixture
def api_for(token_for):
    def make(user, **kwargs) -> APIClient:
        return client_with(token_for(user, **kwargs))

    return make


@pytest.fixture
def small_fleet(catalog):
    """Three simulated single-chip nodes online, one per chip type the demo fleet has; returns node tokens."""
    tokens = {}
    for hostname, chip in [("a-4090", "rtx-4090"), ("a-v5e", "tpu-v5e"), ("a-910b", "ascend-910b")]:
        _, raw = EnrollmentToken.issue(Pool.objects.get(chip_type__slug=chip))
        enrolled = enroll_node(
            enrollment_token=raw,
            hostname=hostname,
            chip_type=chip,
            chips=1,
            simulated=True,
            spot_eligible=False,
            address="127.0.0.1",
        )
        tokens[hostname] = enrolled.token
    return tokens
