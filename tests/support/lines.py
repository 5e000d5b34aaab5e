"""Billing lines in tests: the meter bills an open allocation with its line (the job's chips of one type and mode)."""

from __future__ import annotations

from django.db.models import F

from billing.models import BillingLine
from fleet.models import Allocation


def line_of(allocation: Allocation) -> BillingLine:
    """The billing line the database made for the allocation (its job, chip type and mode)."""
    return BillingLine.objects.get(job=allocation.job_id, chip_type=allocation.chip_type_id, mode=allocation.mode)


def line_charged(allocation: Allocation) -> int:
    """What the allocation's line was charged so far (micro-units)."""
    return line_of(allocation).charged_total


def bill_as_charged(allocation: Allocation, micros: int) -> None:
    """Make a fixture allocation look charged `micros` more: what the meter would have added to its line."""
    BillingLine.objects.filter(pk=line_of(allocation).pk).update(charged_total=F("charged_total") + micros)
