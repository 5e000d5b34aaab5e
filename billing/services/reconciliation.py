"""What each allocation and each billing line should have been charged, against what was: `manage.py reconcile`.

- Per allocation: its billed seconds against its [started_at, ended_at or now), and its charged
  total against its price integrated over those seconds (one rounding, as the meter charges).
- Per billing line (a job's allocations of one chip type and mode; the meter writes one Charge row
  per line and tick): the line's Charge rows sum to its allocations' charged totals, and hold no
  more chip-seconds than its allocations were billed. (Fewer is right where a tick charged nothing:
  a free span, or a wallet that could not pay, writes no row.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db.models import QuerySet, Sum

from base.money import format_amount
from billing.models import Charge
from billing.services.meter import SECOND, billing_mark, owed
from billing.services.pricing import PriceBook
from workers.models import Allocation

Line = tuple[int, int, str]  # job, chip type, mode


def differences(now: datetime, lag: timedelta, allocations: QuerySet[Allocation] | None = None) -> Iterator[str]:
    """Each difference among `allocations` (all by default) and their billing lines, as a line of text."""
    allocations = Allocation.objects.all() if allocations is None else allocations
    book = PriceBook.load()
    billed: dict[Line, list[int]] = defaultdict(lambda: [0, 0])  # line -> [charged total, chip-seconds]
    for a in allocations.order_by("pk").iterator(chunk_size=2000):
        yield from allocation_differences(a, book, now, lag)
        line = billed[a.job_id, a.chip_type_id, a.mode]
        line[0] += a.charged_total
        line[1] += a.chips * ((a.billed_through - a.started_at) // SECOND)
    yield from line_differences(billed, Charge.objects.filter(job__in=allocations.values("job_id")))


def allocation_differences(a: Allocation, book: PriceBook, now: datetime, lag: timedelta) -> Iterator[str]:
    should_through = billing_mark(a.started_at, min(now, a.ended_at) if a.ended_at else now)
    billed = (a.billed_through - a.started_at) // SECOND
    should = (should_through - a.started_at) // SECOND
    if (a.ended_at and billed != should) or billed > should or should - billed > lag // SECOND:
        yield f"allocation {a.pk}: billed {billed}s, ran {should}s"
    due = owed(book, a.chip_type_id, a.mode, a.chips, a.started_at, a.billed_through)
    if a.charged_total != due:
        yield (
            f"allocation {a.pk}: charged {format_amount(a.charged_total)}, "
            f"{billed}s should cost {format_amount(due)} (difference {format_amount(a.charged_total - due)})"
        )


def line_differences(billed: dict[Line, list[int]], charges: QuerySet[Charge]) -> Iterator[str]:
    """Each line's Charge rows against what its allocations say was charged and billed."""
    rows = charges.order_by().values_list("job_id", "chip_type_id", "mode")
    in_rows = {
        (job, chip_type, mode): [amount, chip_seconds]
        for job, chip_type, mode, amount, chip_seconds in rows.annotate(Sum("amount"), Sum("chip_seconds"))
    }
    for line in sorted(billed.keys() | in_rows.keys()):
        (amount, chip_seconds), (total, should) = in_rows.get(line, (0, 0)), billed.get(line, (0, 0))
        job_id, chip_type_id, mode = line
        if amount != total:
            yield (
                f"job {job_id}, chip type {chip_type_id}, {mode}: charge rows sum to {format_amount(amount)}, "
                f"its allocations' charged totals to {format_amount(total)}"
            )
        if chip_seconds > should:
            yield (
                f"job {job_id}, chip type {chip_type_id}, {mode}: charge rows hold {chip_seconds:,} chip-second(s), "
                f"its allocations were billed {should:,}"
            )
