"""Writing a batch: the wallets paid, a ledger transaction per wallet, a Charge row per paid line, the
lines, and the allocations folded in; and what the tick did (`MeterResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db import connection

from billing.choices import AccountKind
from billing.notifications import note_balances
from billing.services.ledger import platform_account
from billing.services.meter.columns import US, Allocations, Lines, int_array, to_us
from billing.services.meter.ledger import lock_line_wallets, pay, post_ledger, rows_by_owner


@dataclass(frozen=True)
class Shortfall:
    """A line whose charge its wallet could not cover in full this tick."""

    line_id: int
    job_id: int
    owner_id: int
    shortfall: int


@dataclass
class MeterResult:
    """What one tick did."""

    lines: int = 0  # lines billed (written)
    allocations: int = 0  # allocations with a new whole second
    seconds: int = 0  # chip-seconds billed
    charged: int = 0
    charges: int = 0  # Charge rows: lines paid
    transactions: int = 0
    settled: int = 0  # ended allocations folded into their lines
    shortfalls: list[Shortfall] = field(default_factory=list)

    def add(self, other: MeterResult) -> None:
        for name in ("lines", "allocations", "seconds", "charged", "charges", "transactions", "settled"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.shortfalls += other.shortfalls


def post_batch(lines: Lines, allocations: Allocations, now: datetime) -> MeterResult:
    """Write the batch: a ledger transaction per wallet, a Charge row per paid line, the lines, and the
    allocations folded in."""
    revenue = platform_account(AccountKind.REVENUE)
    wallets = lock_line_wallets(set(lines.owner[lines.delta > 0].tolist()), revenue)
    lines.charged = pay(lines, wallets)
    paid = lines.take(np.flatnonzero(lines.charged > 0))
    by_owner = [(owner, paid.take(rows)) for owner, rows in rows_by_owner(paid.owner)]
    posted = post_ledger(by_owner, wallets, revenue, now)
    _save(lines, allocations, posted, now)
    # One statement a batch: who fell below their low-balance threshold is e-mailed after the commit.
    note_balances({owner: wallets[owner].balance - int(bills.charged.sum()) for owner, bills in by_owner})
    old_marks = _old_marks(allocations, lines.billed[allocations.row_line])
    short = np.flatnonzero(lines.delta > lines.charged)
    return MeterResult(
        lines=len(lines),
        allocations=int((allocations.mark > old_marks).sum()),
        seconds=int((lines.new_chip_seconds - lines.chip_seconds).sum()),
        charged=int(paid.charged.sum()),
        charges=len(paid),
        transactions=len(posted),
        settled=int(allocations.settling.sum()),
        shortfalls=[
            Shortfall(int(lines.id[i]), int(lines.job[i]), int(lines.owner[i]), int(lines.delta[i] - lines.charged[i]))
            for i in short
        ],
    )


def _old_marks(allocations: Allocations, billed: np.ndarray) -> np.ndarray:
    """Where each allocation's mark stood at its line's last tick (for counting, not for money)."""
    until = np.minimum(allocations.end, billed)
    start = allocations.start
    return np.where(until > start, start + (until - start) // US * US, start)


def _save(lines: Lines, allocations: Allocations, posted: dict[int, int], now: datetime) -> None:
    """In one statement: every line's mark, charged total and chip-seconds; a Charge row for each paid
    line; the allocations that ended, folded in (their final mark, in whole seconds from their start,
    and what their time cost).

    A line's Charge row covers [its previous mark, now): the chips billed this tick, the chip-seconds
    its allocations added, what the wallet paid. (A final charge that had to wait for a later tick of
    the meter ends a microsecond after the line's previous mark.) Times travel as microseconds
    before `now`, so that they stay small and exact.
    """
    txns = np.array([posted.get(owner, 0) for owner in lines.owner.tolist()], dtype=np.int64)
    now_us = to_us(now)
    ended = np.maximum(lines.billed + 1, now_us)
    settling = np.flatnonzero(allocations.settling)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],"
            " %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) AS v(id, charged, chip_seconds,"
            " added, chips, settled_owed, settled_chip_seconds, txn, started, ended)),"
            " folded AS (UPDATE workers_allocation a"
            " SET billed_through = a.started_at + f.seconds * interval '1 second', charged_total = f.owed"
            " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS f(id, seconds, owed)"
            " WHERE a.id = f.id),"
            " moved AS (UPDATE billing_billingline l SET billed_through = greatest(l.billed_through, %s),"
            " charged_total = l.charged_total + v.charged, chip_seconds = v.chip_seconds,"
            " settled_owed = l.settled_owed + v.settled_owed,"
            " settled_chip_seconds = l.settled_chip_seconds + v.settled_chip_seconds"
            " FROM v WHERE l.id = v.id"
            " RETURNING l.id, l.job_id, l.chip_type_id, l.mode, v.charged, v.added, v.chips, v.txn, v.started, v.ended)"
            " INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips,"
            " started_at, ended_at, seconds, chip_seconds, amount, transaction_id, created_at)"
            " SELECT NULL, m.job_id, j.owner_id, m.chip_type_id, m.mode, m.chips,"
            " %s - m.started * interval '1 microsecond', %s - m.ended * interval '1 microsecond',"
            " (m.started - m.ended) / 1000000, m.added, m.charged, m.txn, %s"
            " FROM moved m JOIN workers_job j ON j.id = m.job_id WHERE m.charged > 0 ORDER BY m.id",
            [
                int_array(lines.id),
                int_array(lines.charged),
                int_array(lines.new_chip_seconds),
                int_array(lines.new_chip_seconds - lines.chip_seconds),
                int_array(lines.chips),
                int_array(lines.settling_owed),
                int_array(lines.settling_chip_seconds),
                int_array(txns),
                int_array(now_us - lines.billed),
                int_array(now_us - ended),
                int_array(allocations.id[settling]),
                int_array(allocations.seconds[settling]),
                int_array(allocations.owed[settling]),
                now,
                now,
                now,
                now,
            ],
        )
