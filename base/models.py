"""Stored answers of POSTs sent with an `Idempotency-Key` (replayed to retries for 24 hours), and the audit log."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# A retry a day later is a new request: keys are remembered this long (Stripe's window too).
IDEMPOTENCY_KEY_TTL = timedelta(hours=24)


class IdempotentRequest(models.Model):
    """One user's request under one Idempotency-Key and the successful answer it got."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotent_requests")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    body_hash = models.CharField(max_length=64, help_text=_("SHA-256 of the method, path and canonical body."))
    status_code = models.PositiveSmallIntegerField()
    # Text, not jsonb: jsonb reorders keys, and a replay should be byte-for-byte the first answer.
    response_body = models.TextField(blank=True, help_text=_("The answer's JSON as it was sent."))
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        # Made by the portal app before this model moved here; the table kept its name.
        db_table = "portal_idempotentrequest"
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotent_request_user_key")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.key}] -> {self.status_code}"

    def is_expired(self, now=None) -> bool:
        return self.created_at <= (now or timezone.now()) - IDEMPOTENCY_KEY_TTL

    @classmethod
    def purge_expired(cls, now=None) -> int:
        """Forget keys older than the TTL; returns how many were deleted."""
        cutoff = (now or timezone.now()) - IDEMPOTENCY_KEY_TTL
        deleted, _ = cls.objects.filter(created_at__lte=cutoff).delete()
        return deleted


class AuditEntry(models.Model):
    """One operator action: who did what to which row, when, with its details (before/after, reason)."""

    at = models.DateTimeField(default=timezone.now, db_index=True, verbose_name=_("at"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("actor"),
    )
    actor_name = models.CharField(
        max_length=150, blank=True, help_text=_("The actor's username when it acted."), verbose_name=_("actor name")
    )
    action = models.CharField(
        max_length=64, db_index=True, help_text='What was done, e.g. "node.drain".', verbose_name=_("action")
    )
    target_type = models.CharField(
        max_length=100, blank=True, help_text='The row\'s model, e.g. "fleet.node".', verbose_name=_("target type")
    )
    target_id = models.CharField(max_length=64, blank=True, verbose_name=_("target id"))
    target_repr = models.CharField(
        max_length=200, blank=True, help_text=_("The row as it read when acted on."), verbose_name=_("target repr")
    )
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("details"))

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_entry_target")]
        verbose_name = _("audit log entry")
        verbose_name_plural = _("audit log")

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name or 'platform'} {self.action} {self.target_repr}"


from base.preferences import Preferences  # noqa: E402 - a person's language and time zone, read by every app

__all__ = ["AuditEntry", "IdempotentRequest", "Preferences"]
