"""Compute usage as billed: one row per meter charge, written with its ledger transaction."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from billing.money import format_amount


class Charge(models.Model):
    """What one allocation was charged for [started_at, ended_at): the basis of statements."""

    allocation = models.ForeignKey("workers.Allocation", on_delete=models.PROTECT, related_name="charges")
    job = models.ForeignKey("workers.Job", on_delete=models.PROTECT, related_name="charges")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="charges")
    chip_type = models.ForeignKey("workers.ChipType", on_delete=models.PROTECT, related_name="+")
    mode = models.CharField(max_length=12)
    chips = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    seconds = models.PositiveIntegerField(help_text="Wall-clock seconds covered (per chip).")
    amount = models.BigIntegerField(help_text="micro-units")
    transaction = models.OneToOneField("billing.Transaction", on_delete=models.PROTECT, related_name="charge")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-ended_at", "-id"]
        indexes = [models.Index(fields=["owner", "ended_at"]), models.Index(fields=["allocation", "ended_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="charge_not_negative"),
            models.CheckConstraint(condition=Q(ended_at__gt=models.F("started_at")), name="charge_covers_time"),
        ]

    def __str__(self) -> str:
        return f"{format_amount(self.amount)} for allocation {self.allocation_id} ({self.seconds}s)"
