"""What each allocation and each billing line should have been charged, against what was: `manage.py reconcile`.

A billing line is one job's allocations of one chip type and mode (`billing.models.BillingLine`).
The meter bills a line's open allocations on the line and folds each one in when it ends.

- An allocation folded in: billed through the last whole second before its end, its charged total
  its price integrated over those seconds (one rounding, as the meter charges).
- An allocation that ended more than `lag` ago and is not folded in yet: reported.
- A line: what its folded-in allocations cost against its settled totals; what all its allocations
  cost up to its mark (each open one billed through its last whole second before the mark) against
  what it was charged (a difference is money unpaid, or charged twice); its Charge rows against its
  charged total, and no more chip-seconds in them than were billed; an open line billed more than
  `lag` behind now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db.models import QuerySet, Sum

from billing.models import BillingLine, Charge
from billing.services.meter import SECOND, billing_mark, owed
from billing.services.pricing import PriceBook
from fleet.models import Allocation
from kernel.money import format_amount

Key = tuple[int, int, str]  # job, chip type, mode


class Totals:
    """What a line's allocations add up to: settled (folded in) and at the line's mark."""

    def __init__(self) -> None:
        self.settled_owed = self.settled_chip_seconds = self.owed = self.chip_seconds = 0
        self.open = False


def differences(now: datetime, lag: timedelta, allocations: QuerySet[Allocation] | None = None) -> Iterator[str]:
    """Each difference among `allocations` (all by default) and their billing lines, as a line of text."""
    allocations = Allocation.objects.all() if allocations is None else allocations
    book = PriceBook.load()
    lines = {
        (line.job_id, line.chip_type_id, line.mode): line
        for line in BillingLine.objects.filter(job__in=allocations.values("job_id"))
    }
    totals: dict[Key, Totals] = defaultdict(Totals)
    for a in allocations.order_by("pk").iterator(chunk_size=2000):
        key = (a.job_id, a.chip_type_id, a.mode)
        line, total = lines.get(key), totals[key]
        if line is None:
            yield f"allocation {a.pk}: no billing line"
            continue
        if a.ended_at and a.billed_through > a.ended_at - SECOND:  # folded into its line
            yield from _folded_differences(a, book)
            seconds = (a.billed_through - a.started_at) // SECOND
            total.settled_owed += a.charged_total
            total.settled_chip_seconds += a.chips * seconds
            continue
        if a.ended_at and now - a.ended_at > lag:
            yield f"allocation {a.pk}: ended {(now - a.ended_at) // SECOND}s ago and not billed through its end"
        total.open = total.open or a.ended_at is None
        mark = billing_mark(a.started_at, min(line.billed_through, a.ended_at or line.billed_through))
        total.owed += owed(book, a.chip_type_id, a.mode, a.chips, a.started_at, mark)
        total.chip_seconds += a.chips * ((mark - a.started_at) // SECOND)
    rows = _charge_rows(lines.values())
    for key, line in sorted(lines.items()):
        yield from _line_differences(line, totals[key], rows.get(line.pk, (0, 0)), now, lag)


def _folded_differences(a: Allocation, book: PriceBook) -> Iterator[str]:
    billed = (a.billed_through - a.started_at) // SECOND
    should = (billing_mark(a.started_at, a.ended_at) - a.started_at) // SECOND
    if billed != should:
        yield f"allocation {a.pk}: billed {billed}s, ran {should}s"
    due = owed(book, a.chip_type_id, a.mode, a.chips, a.started_at, a.billed_through)
    if a.charged_total != due:
        yield (
            f"allocation {a.pk}: charged {format_amount(a.charged_total)}, "
            f"{billed}s should cost {format_amount(due)} (difference {format_amount(a.charged_total - due)})"
        )


def _charge_rows(lines) -> dict[int, tuple[int, int]]:
    """{line id: (amount, chip-seconds)} of the lines' Charge rows."""
    ids = {(line.job_id, line.chip_type_id, line.mode): line.pk for line in lines}
    sums = (
        Charge.objects.filter(job__in={job for job, _, _ in ids})
        .order_by()
        .values_list("job_id", "chip_type_id", "mode")
        .annotate(Sum("amount"), Sum("chip_seconds"))
    )
    return {ids[job, chip_type, mode]: (amount, chip_seconds) for job, chip_type, mode, amount, chip_seconds in sums}


def _line_differences(
    line: BillingLine, total: Totals, rows: tuple[int, int], now: datetime, lag: timedelta
) -> Iterator[str]:
    name = f"line {line.pk} (job {line.job_id}, chip type {line.chip_type_id}, {line.mode})"
    if (line.settled_owed, line.settled_chip_seconds) != (total.settled_owed, total.settled_chip_seconds):
        yield (
            f"{name}: settled {format_amount(line.settled_owed)} for {line.settled_chip_seconds:,} chip-second(s), "
            f"its ended allocations {format_amount(total.settled_owed)} for {total.settled_chip_seconds:,}"
        )
    should, chip_seconds = line.settled_owed + total.owed, line.settled_chip_seconds + total.chip_seconds
    if line.charged_total != should:
        yield (
            f"{name}: charged {format_amount(line.charged_total)}, its seconds cost {format_amount(should)}"
            f" (difference {format_amount(line.charged_total - should)})"
        )
    if line.chip_seconds != chip_seconds:
        yield f"{name}: billed {line.chip_seconds:,} chip-second(s), its allocations ran {chip_seconds:,}"
    amount, in_rows = rows
    if amount != line.charged_total:
        yield f"{name}: charge rows sum to {format_amount(amount)}, it was charged {format_amount(line.charged_total)}"
    if in_rows > line.chip_seconds:
        yield f"{name}: charge rows hold {in_rows:,} chip-second(s), the line was billed {line.chip_seconds:,}"
    if total.open and now - line.billed_through > lag:
        yield f"{name}: billed {(now - line.billed_through) // SECOND}s behind now"
