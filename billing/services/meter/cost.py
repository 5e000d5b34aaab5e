"""What an allocation owes up to its mark: the rule for one allocation, and a batch's columns priced by it.

`owed` is the rule (Python integers, one allocation); `advance` prices a whole batch on numpy
columns (`billing.services.meter.columns.PriceLines`), to the micro-unit as `owed` does, and falls
back to `owed` where a batch's numbers could outgrow an int64.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from billing.services.meter.columns import US, Allocations, Lines, PriceLines, from_us, to_us
from billing.services.pricing import PriceBook
from fleet.choices import AllocationMode
from kernel.money import cost_of_integral

SECOND = timedelta(seconds=1)


def billing_mark(started_at: datetime, until: datetime) -> datetime:
    """`until` truncated to a whole number of seconds since `started_at` (never before it)."""
    if until <= started_at:
        return started_at
    return started_at + SECOND * ((until - started_at) // SECOND)


def owed(book: PriceBook, chip_type_id: int, mode: str, chips: int, started_at: datetime, mark: datetime) -> int:
    """What [started_at, mark) costs, rounded once, half up (the cumulative-exact total)."""
    return cost_of_integral(chips * book.integral(chip_type_id, mode, started_at, mark))


def advance(lines: Lines, allocations: Allocations, book: PriceBook, now: datetime) -> None:
    """Each allocation's new mark and cost; each line's new owed total and chip-seconds, and what it owes
    beyond its charges."""
    a = allocations
    now_us = to_us(now)
    until = np.minimum(a.end, now_us)
    a.mark = np.where(until > a.start, a.start + (until - a.start) // US * US, a.start)
    a.settling = a.end <= now_us
    a.owed = np.empty(len(a.id), dtype=np.int64)
    groups = [
        (_line(chip_type, spot), rows)
        for (chip_type, spot), rows in _line_rows(lines.chip_type[a.row_line], lines.spot[a.row_line])
    ]
    # Each price line's running price sums, from its earliest start in the batch to now.
    prices = PriceLines(book, {key: (from_us(a.start[rows].min()), now) for key, rows in groups})
    for key, rows in groups:
        chips, start, mark = a.chips[rows], a.start[rows], a.mark[rows]
        if prices.fits(chips):
            a.owed[rows] = prices.owed(key, chips, start, mark)
        else:  # prices or spans too large for int64 halves: Python's integers, one allocation at a time
            a.owed[rows] = [
                owed(book, *key, int(c), from_us(s), from_us(m)) for c, s, m in zip(chips, start, mark, strict=True)
            ]

    def per_line(values: np.ndarray) -> np.ndarray:
        total = np.zeros(len(lines), dtype=np.int64)
        np.add.at(total, a.row_line, values)
        return total

    chip_seconds = a.chips * a.seconds
    lines.owed = lines.settled_owed + per_line(a.owed)
    # Never below what was billed: a final charge for a time before the line's last tick (it waited
    # for that tick's lock) bills nothing that tick had not.
    lines.new_chip_seconds = np.maximum(lines.settled_chip_seconds + per_line(chip_seconds), lines.chip_seconds)
    lines.chips = per_line(a.chips)
    lines.settling_owed = per_line(np.where(a.settling, a.owed, 0))
    lines.settling_chip_seconds = per_line(np.where(a.settling, chip_seconds, 0))
    lines.delta = np.maximum(lines.owed - lines.charged_total, 0)


def _line(chip_type: int, spot: int) -> tuple[int, str]:
    return int(chip_type), AllocationMode.SPOT if spot else AllocationMode.ON_DEMAND


def _line_rows(chip_types: np.ndarray, spot: np.ndarray):
    """((chip type, spot), row indices) for each price line present."""
    codes = chip_types * 2 + (spot != 0)
    for code in np.unique(codes):
        yield (int(code) // 2, int(code) % 2), np.flatnonzero(codes == code)
