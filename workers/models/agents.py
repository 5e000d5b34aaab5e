"""How node agents join and talk to the platform: enrollment tokens and queued commands."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from base.tokens import hash_token
from fleet.choices import CommandStatus
from kernel.protocol import ENROLLMENT_TOKEN_PREFIX, NODE_TOKEN_PREFIX


def new_node_token() -> str:
    return NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)


ENROLLMENT_TOKEN_LIFETIME = timedelta(hours=24)


def default_token_expiry() -> datetime:
    return timezone.now() + ENROLLMENT_TOKEN_LIFETIME


class EnrollmentToken(models.Model):
    """A secret an operator hands to a compute host so its agent can join one pool."""

    pool = models.ForeignKey(
        "fleet.Pool", on_delete=models.CASCADE, related_name="enrollment_tokens", verbose_name=_("pool")
    )
    name = models.CharField(max_length=80, default="enrollment token", verbose_name=_("name"))
    prefix = models.CharField(max_length=12, editable=False, verbose_name=_("prefix"))
    token_hash = models.CharField(max_length=64, unique=True, editable=False, verbose_name=_("token hash"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    expires_at = models.DateTimeField(
        default=default_token_expiry, help_text=_("Refused after this time."), verbose_name=_("expires at")
    )
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))
    uses = models.PositiveIntegerField(default=0, editable=False, verbose_name=_("uses"))
    max_uses = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text=_("How many hosts may enroll with it."),
        verbose_name=_("max uses"),
    )
    approved_chips = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text=_("The most chips a host enrolling with it may declare."),
        verbose_name=_("approved chips"),
    )

    class Meta:
        verbose_name = _("enrollment token")
        verbose_name_plural = _("enrollment tokens")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) for {self.pool}"

    @classmethod
    def issue(
        cls,
        pool,
        *,
        chips: int = 1,
        max_uses: int = 1,
        lifetime: timedelta = ENROLLMENT_TOKEN_LIFETIME,
        name: str = "enrollment token",
        created_by=None,
        raw: str | None = None,
    ):
        """Create a token approving `chips` per node for `max_uses` hosts; returns (token, raw secret)."""
        raw = raw or ENROLLMENT_TOKEN_PREFIX + secrets.token_urlsafe(24)
        token = cls.objects.create(
            pool=pool,
            name=name,
            prefix=raw[:10],
            token_hash=hash_token(raw),
            created_by=created_by,
            expires_at=timezone.now() + lifetime,
            max_uses=max_uses,
            approved_chips=chips,
        )
        return token, raw

    def refusal(self, now: datetime | None = None) -> tuple[str, str] | None:
        """(code, reason) why this token can't enroll a host now, or None when it can."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            return (
                "enrollment_token_revoked",
                f"This enrollment token was revoked at {self.revoked_at:%Y-%m-%d %H:%M} UTC.",
            )
        if self.expires_at <= now:
            return (
                "enrollment_token_expired",
                f"This enrollment token expired at {self.expires_at:%Y-%m-%d %H:%M} UTC; "
                "ask the operator for a new one.",
            )
        if self.uses >= self.max_uses:
            return (
                "enrollment_token_used_up",
                f"This enrollment token is used up ({self.uses} of {self.max_uses} enrollment(s)); "
                "ask the operator for a new one.",
            )
        return None

    @property
    def is_usable(self) -> bool:
        return self.refusal() is None


class AgentCommand(models.Model):
    """An order for one node's agent, re-sent on every poll until the agent acks it."""

    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="commands")
    job = models.ForeignKey("fleet.Job", on_delete=models.CASCADE, related_name="commands")
    epoch = models.PositiveIntegerField()
    type = models.CharField(max_length=16)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=CommandStatus.choices, default=CommandStatus.PENDING)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["node", "status"])]

    def __str__(self) -> str:
        return f"{self.type} job {self.job_id} epoch {self.epoch} → {self.node_id}"

    def as_message(self) -> dict:
        return {
            "id": self.pk,
            "type": self.type,
            "job_id": self.job_id,
            "epoch": self.epoch,
            "payload": self.payload,
        }
