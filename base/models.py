"""Stored answers of POSTs sent with an `Idempotency-Key`, replayed to retries for 24 hours."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

# A retry a day later is a new request: keys are remembered this long (Stripe's window too).
IDEMPOTENCY_KEY_TTL = timedelta(hours=24)


class IdempotentRequest(models.Model):
    """One user's request under one Idempotency-Key and the successful answer it got."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotent_requests")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    body_hash = models.CharField(max_length=64, help_text="SHA-256 of the method, path and canonical body.")
    status_code = models.PositiveSmallIntegerField()
    # Text, not jsonb: jsonb reorders keys, and a replay should be byte-for-byte the first answer.
    response_body = models.TextField(blank=True, help_text="The answer's JSON as it was sent.")
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
