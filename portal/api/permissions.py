"""Read-only tokens may read but not write."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

from portal.models import ApiToken, TokenScope


class TokenScopeAllows(BasePermission):
    message = _("This API token is read-only.")

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if request.method in SAFE_METHODS or not isinstance(token, ApiToken):
            return True
        return token.scope != TokenScope.READ_ONLY
