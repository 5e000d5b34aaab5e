"""Settings the operator edits in the admin console (one row)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from kernel.money import format_amount, to_micros


def default_trial_credit() -> int:
    return to_micros(settings.DEFAULT_TRIAL_CREDIT)


class OperatorSettings(models.Model):
    """Platform-wide knobs; there is exactly one row (pk=1)."""

    trial_credit = models.BigIntegerField(
        _("trial credit"), default=default_trial_credit, help_text=_("Credit granted once at sign-up, in micro-units.")
    )
    hold_minutes = models.PositiveIntegerField(
        _("hold minutes"), default=5, help_text=_("A launch needs the balance to cover this many minutes of its plan.")
    )
    stop_margin_minutes = models.PositiveIntegerField(
        _("stop margin minutes"),
        default=2,
        help_text=_("A job is checkpointed and stopped when its balance would run out within this time."),
    )
    topup_minimum = models.BigIntegerField(
        _("top-up minimum"), default=10_000_000, help_text=_("Smallest top-up, in micro-units.")
    )
    topup_maximum = models.BigIntegerField(
        _("top-up maximum"), default=10_000_000_000, help_text=_("Largest top-up, in micro-units.")
    )
    staff_two_factor_required = models.BooleanField(
        _("staff two-factor required"),
        default=False,
        help_text=_(
            "Staff must use two-factor sign-in (an authenticator app): without it, the admin sends them "
            "to set it up first."
        ),
    )
    telemetry_retention_days = models.PositiveIntegerField(
        _("telemetry retention days"),
        default=90,
        validators=[MinValueValidator(1), MaxValueValidator(36500)],
        help_text=_(
            "A job's log lines and per-step metrics are deleted this many days after the job ended "
            "(its summary, timeline, cost and checkpoints stay)."
        ),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = verbose_name_plural = _("operator settings")
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="operator_settings_singleton"),
            models.CheckConstraint(condition=Q(trial_credit__gte=0), name="trial_credit_not_negative"),
        ]

    def __str__(self) -> str:
        return str(_("Operator settings"))

    @classmethod
    def load(cls) -> OperatorSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj

    @property
    def trial_credit_display(self) -> str:
        return format_amount(self.trial_credit)
