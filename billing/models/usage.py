"""Compute usage as billed: one row per allocation per meter tick, written with the ledger transaction that paid it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from base.money import format_amount


class Charge(models.Model):
    """What one allocation was charged for [started_at, ended_at): the basis of statements."""

    # The allocation is a real foreign key. Job, owner and chip type are copies of the allocation's,
    # and the transaction that paid is append-only: instead of a per-row foreign key check each
    # (at commit), one statement-level trigger checks every inserted row against its allocation and
    # its transaction (billing migration 0006). Deleting what a charge names is still refused by the
    # database (allocation -> job -> owner, allocation -> chip type; transactions are never deleted).
    # The single-column indexes that (owner, ended_at) and (allocation, ended_at) cover are left out.
    allocation = models.ForeignKey(
        "workers.Allocation", on_delete=models.PROTECT, related_name="charges", db_index=False
    )
    job = models.ForeignKey("workers.Job", on_delete=models.PROTECT, related_name="charges", db_constraint=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="charges", db_constraint=False, db_index=False
    )
    chip_type = models.ForeignKey(
        "workers.ChipType", on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False
    )
    mode = models.CharField(max_length=12)
    chips = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    seconds = models.PositiveIntegerField(help_text="Wall-clock seconds covered (per chip).")
    amount = models.BigIntegerField(help_text="micro-units")
    # One CHARGE transaction per wallet per meter tick pays all of that wallet's charges of the tick.
    transaction = models.ForeignKey(
        "billing.Transaction", on_delete=models.PROTECT, related_name="charges", db_constraint=False
    )
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
