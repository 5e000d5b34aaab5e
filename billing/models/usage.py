"""Compute usage as billed: one row per billing line per meter tick, written with the ledger transaction that paid it.

A billing line is one job's allocations of one chip type and mode: they cost the same per chip-second.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from kernel.money import format_amount


class BillingLine(models.Model):
    """One job's allocations of one chip type and mode: what the meter bills as one.

    While an allocation is open its billing lives here, not on its own row: a tick reads the line's
    open allocations, prices each from its start to its last whole second before the tick (one
    rounding each, as always), and charges the line what that adds to `settled_owed` beyond
    `charged_total`. The allocation rows are not written until one ends: then the meter folds it in
    (its own `billed_through` and `charged_total` become final and are added to `settled_*`).

    The database makes a line for every new allocation (a trigger on the allocation table, billing
    migration 0011), so every allocation has one however it was created.
    """

    job = models.ForeignKey(
        "fleet.Job", on_delete=models.PROTECT, related_name="billing_lines", db_index=False
    )  # the unique (job, chip type, mode) index serves lookups by job
    chip_type = models.ForeignKey("fleet.ChipType", on_delete=models.PROTECT, related_name="+", db_index=False)
    mode = models.CharField(max_length=12)
    billed_through = models.DateTimeField(help_text=_("When the meter last billed the line (or its first start)."))
    charged_total = models.BigIntegerField(default=0, help_text=_("What the line's wallet paid, in micro-units."))
    chip_seconds = models.BigIntegerField(default=0, help_text=_("Chip-seconds billed, ended allocations included."))
    settled_owed = models.BigIntegerField(default=0, help_text=_("What the line's folded-in (ended) allocations cost."))
    settled_chip_seconds = models.BigIntegerField(default=0, help_text=_("Their chip-seconds."))

    class Meta:
        verbose_name = _("billing line")
        verbose_name_plural = _("billing lines")
        constraints = [
            models.UniqueConstraint(fields=["job", "chip_type", "mode"], name="one_billing_line_per_kind"),
            models.CheckConstraint(condition=Q(charged_total__gte=0), name="billing_line_charged_not_negative"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.chip_type_id} {self.mode}"


class Charge(models.Model):
    """What one billing line (a job's allocations of one chip type and mode) was charged by one
    ledger transaction for [started_at, ended_at): the basis of statements.

    The meter writes one row per line per tick, not one per allocation: a tick over 100,000
    allocations writes a few thousand rows. Rows written before that (billing migration 0010) each
    name their allocation; the meter's rows name none (`allocation` is empty).
    """

    # Job, owner and chip type are the line's, and the transaction that paid is append-only: instead
    # of a per-row foreign key check each (at commit), one statement-level trigger checks every
    # inserted row against its job's owner, its chip type, its allocation where it names one, and its
    # transaction (billing migrations 0006, 0010). Deleting what a charge names is still refused by
    # the database: a job's allocations protect it, and transactions are never deleted.
    allocation = models.ForeignKey(
        "fleet.Allocation", on_delete=models.PROTECT, related_name="charges", null=True, blank=True, db_index=False
    )
    job = models.ForeignKey("fleet.Job", on_delete=models.PROTECT, related_name="charges", db_constraint=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="charges", db_constraint=False, db_index=False
    )
    chip_type = models.ForeignKey(
        "fleet.ChipType", on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False
    )
    mode = models.CharField(max_length=12)
    chips = models.PositiveIntegerField(help_text=_("Chips of the line's allocations this row charges for."))
    started_at = models.DateTimeField(help_text=_("The earliest second the row charges for."))
    ended_at = models.DateTimeField(help_text=_("Just after the latest second the row charges for."))
    seconds = models.PositiveIntegerField(
        help_text=_("Wall-clock seconds covered: the longest of the line's allocations.")
    )
    chip_seconds = models.BigIntegerField(
        help_text=_("Chip-seconds charged for: each allocation's chips × its seconds.")
    )
    amount = models.BigIntegerField(help_text=_("micro-units"))
    # One CHARGE transaction per wallet per meter tick pays all of that wallet's charges of the tick.
    transaction = models.ForeignKey(
        "billing.Transaction", on_delete=models.PROTECT, related_name="charges", db_constraint=False
    )
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = _("charge")
        verbose_name_plural = _("charges")
        ordering = ["-ended_at", "-id"]
        indexes = [models.Index(fields=["owner", "ended_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="charge_not_negative"),
            models.CheckConstraint(condition=Q(ended_at__gt=models.F("started_at")), name="charge_covers_time"),
        ]

    def __str__(self) -> str:
        return f"{format_amount(self.amount)} for job {self.job_id}: {self.chip_seconds} chip-second(s)"
