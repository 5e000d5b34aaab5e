"""Signing in for tests: the actors' password and API clients with a token."""

from __future__ import annotations

from rest_framework.test import APIClient

PASSWORD = "correct-horse-battery-staple"


def token_client(user, **issue):
    """An API client for `user` with a fresh token (`issue`: ApiToken.issue's scope, expires_at...)."""
    from rest_framework.test import APIClient

    from portal.models import ApiToken

    _, raw = ApiToken.issue(user, **issue)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def client_with(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api
