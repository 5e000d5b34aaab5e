"""What a user wants to be told by e-mail, and which e-mails were already sent.

One row per user who changed a default (no row: no low-balance e-mail, job e-mails on), so the
meter's check touches only users who asked for a threshold.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class NotificationSettings(models.Model):
    """A user's e-mail choices: a low-balance threshold (0: off) and whether jobs ending send e-mail."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    low_balance_threshold = models.BigIntegerField(
        default=0, help_text=_("E-mail once when the balance falls below this, in micro-units; 0 turns it off.")
    )
    # Set when the low-balance e-mail goes out, cleared when the balance is back at or above the
    # threshold: one e-mail per crossing, not one per meter tick.
    low_balance_notified = models.BooleanField(default=False)
    job_emails = models.BooleanField(default=True, help_text=_("E-mail when a job succeeds, fails or is stopped."))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("notification settings")
        verbose_name_plural = _("notification settings")
        constraints = [
            models.CheckConstraint(condition=models.Q(low_balance_threshold__gte=0), name="threshold_not_negative")
        ]

    def __str__(self) -> str:
        return f"notification settings of user {self.user_id}"


class SentNotification(models.Model):
    """An e-mail that must go out once (e.g. `job-end:42`): a retried task finds its key and sends nothing."""

    key = models.CharField(max_length=100, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("sent notification")
        verbose_name_plural = _("sent notifications")

    def __str__(self) -> str:
        return self.key
