"""API tokens: shown once, stored as a SHA-256 hash, revocable, optionally expiring."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.cache import cache
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from base.tokens import hash_token

TOKEN_PREFIX = "sv_"
# A new token expires after this many days unless its owner picks another lifetime (or none) (#28).
DEFAULT_EXPIRY_DAYS = 90
MAX_EXPIRY_DAYS = 365


def token_cache_key(token_hash: str) -> str:
    """Where the API's authentication keeps a looked-up token for a few seconds (portal.api.authentication)."""
    return f"api-token:v2:{token_hash}"  # v2: the entry says whether its user's e-mail is confirmed


class TokenScope(models.TextChoices):
    READ_WRITE = "read_write", _("Read and write")
    READ_ONLY = "read_only", _("Read only")


class ApiTokenQuerySet(models.QuerySet):
    def usable(self, now=None) -> ApiTokenQuerySet:
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


class ApiToken(models.Model):
    """A user's bearer token for the REST API, SDK and CLI."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(max_length=80, default="API token", verbose_name=_("name"))
    prefix = models.CharField(
        max_length=12, help_text=_("The first characters, to recognise a token."), verbose_name=_("prefix")
    )
    token_hash = models.CharField(max_length=64, unique=True, verbose_name=_("token hash"))
    scope = models.CharField(
        max_length=16, choices=TokenScope.choices, default=TokenScope.READ_WRITE, verbose_name=_("scope")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("expires at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("api token")
        verbose_name_plural = _("api tokens")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, *, name: str = "API token", scope: str = TokenScope.READ_WRITE, expires_at=None):
        """Create a token; returns (token, raw secret). The raw secret is never stored."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user,
            name=name,
            prefix=raw[:10],
            token_hash=hash_token(raw),
            scope=scope,
            expires_at=expires_at,
        )
        return token, raw

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    def revoke(self, now=None) -> None:
        """Revoke once; revoking again keeps the first time."""
        ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=now or timezone.now())
        self.refresh_from_db(fields=["revoked_at"])
        cache.delete(token_cache_key(self.token_hash))  # a cached lookup must not outlive the revocation
