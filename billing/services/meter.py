"""The per-second meter: charge each billing line for its allocations' seconds up to now.

A billing line (`billing.models.BillingLine`) is one job's allocations of one chip type and mode.

Rules:

- An allocation's mark only moves in whole seconds from `started_at`: billed up to `now`, it is
  billed through `min(now, ended_at)` truncated to a whole number of seconds since `started_at`. A
  fraction of a second at the end of an allocation is not billed.
- Cumulative-exact: what an allocation owes up to its mark is
  `round_micros(chips x integral of price_per_hour over [started_at, mark) / 3600 s)`, computed
  from scratch every time. A line owes what its ended allocations owed when they were folded in
  (`settled_owed`) plus what each open one owes now, and a tick charges the line
  `owed - charged_total`. However many ticks, each allocation's part is one rounding of its span.
- Open allocations are read, not written: a tick writes the lines (mark, charged total,
  chip-seconds), one Charge row per paid line, and the allocations that ended. Those are folded in
  once: their own `billed_through` and `charged_total` (what their time cost) become final, and
  are added to the line's settled totals, so later ticks no longer read them.
- One database transaction per batch: the line rows are locked, their allocations read after the
  lock, and the ledger transactions, the Charge rows, the lines and the folded-in allocations
  commit together or not at all. A retry, a second beat or a crashed worker's redelivery re-reads
  the lines and owes nothing more.
- One ledger transaction per wallet per batch (wallet -> revenue, key
  `meter:w{wallet}:{tick time in us}:l{first line}`) pays all of that wallet's lines; the tick's
  Charge rows name it. Batches keep a wallet's lines together, so a wallet is charged once a tick
  unless its lines hold more allocations than a batch does.
- A wallet never goes negative. When a wallet cannot cover what its lines owe, each is charged in
  id order while the balance lasts (the last one partly); the unpaid rest stays visible as
  `owed - charged_total` (which `manage.py reconcile` reports), the next tick asks for it again,
  and after the commit the shortfall is announced (`billing.signals.credit_shortfall`): the job is
  stopped at once by whoever acts on jobs. The stop margin makes this rare: the low-balance check
  (billing.services.holds) asks for a stop minutes before.
- Prices come from `billing.services.pricing.PriceBook`. A batch is read and priced as numpy columns
  (`billing.services.meter_columns`), to the micro-unit, exactly as `owed` prices one allocation.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from base.money import format_money
from billing.choices import AccountKind
from billing.notifications import note_balances
from billing.services.ledger import platform_account
from billing.services.meter_columns import (
    US,
    Allocations,
    Lines,
    PriceLines,
    column_cursor,
    columns_of,
    from_us,
    int_array,
    to_us,
)
from billing.services.meter_ledger import lock_line_wallets, pay, post_ledger, rows_by_owner
from billing.services.pricing import PriceBook
from billing.signals import credit_shortfall
from workers.choices import AllocationMode

logger = logging.getLogger(__name__)

SECOND = timedelta(seconds=1)
MICROSECONDS_PER_HOUR = 3600 * 1_000_000
BATCH = 2500  # allocations per database transaction: a batch holds its lines and wallets locked ~0.1 s

# An allocation still to bill: open, or ended and not yet folded into its line (folding it in sets
# its billed_through to its last whole second, which is after ended_at - 1 s).
UNSETTLED = "(a.ended_at IS NULL OR a.billed_through <= a.ended_at - interval '1 second')"
OF_LINE = "a.job_id = l.job_id AND a.chip_type_id = l.chip_type_id AND a.mode = l.mode"


# What is owed ---------------------------------------------------------------------------------


def billing_mark(started_at: datetime, until: datetime) -> datetime:
    """`until` truncated to a whole number of seconds since `started_at` (never before it)."""
    if until <= started_at:
        return started_at
    return started_at + SECOND * ((until - started_at) // SECOND)


def owed(book: PriceBook, chip_type_id: int, mode: str, chips: int, started_at: datetime, mark: datetime) -> int:
    """What [started_at, mark) costs, rounded once, half up (the cumulative-exact total)."""
    return round_half_up(chips * book.integral(chip_type_id, mode, started_at, mark), MICROSECONDS_PER_HOUR)


def round_half_up(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half away from zero, in integers (money.round_micros's rule, exactly)."""
    whole, rest = divmod(abs(numerator), denominator)
    whole += 2 * rest >= denominator
    return whole if numerator >= 0 else -whole


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


# Ticks ----------------------------------------------------------------------------------------


def due_lines(now: datetime) -> list[tuple[int, int, int]]:
    """(line, owner, unsettled allocations) of each line with something to bill and not billed in the
    last second, by owner then line."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.id, j.owner_id, count(*) FROM billing_billingline l JOIN workers_job j ON j.id = l.job_id"
            f" JOIN workers_allocation a ON {OF_LINE} WHERE l.billed_through <= %s AND {UNSETTLED}"
            " GROUP BY l.id, j.owner_id ORDER BY j.owner_id, l.id",
            [now - SECOND],
        )
        return cursor.fetchall()


def run_meter(now=None, batch: int = BATCH) -> MeterResult:
    """One beat: bill every due line up to `now`. Lines another tick holds are skipped.

    Batches hold whole wallets where they can (lines by owner, then id), so that a wallet gets one
    ledger transaction a tick.
    """
    now = now or timezone.now()
    book = PriceBook.load()
    result = MeterResult()
    for ids in _batches(due_lines(now), batch):
        result.add(charge_lines(ids, now, book=book, skip_locked=True))
    return result


def _batches(rows: list[tuple[int, int, int]], size: int) -> list[list[int]]:
    """Line ids in batches of about `size` allocations, cut between owners (an owner with more is split)."""
    by_owner: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for line, owner_id, count in rows:
        by_owner[owner_id].append((line, count))
    batches: list[list[int]] = [[]]
    held = 0
    for lines in by_owner.values():
        if batches[-1] and held + sum(count for _, count in lines) > size:
            batches.append([])
            held = 0
        for line, count in lines:
            if batches[-1] and held + count > size:
                batches.append([])
                held = 0
            batches[-1].append(line)
            held += count
    return [ids for ids in batches if ids]


def charge_allocation(allocation_id: int, now=None) -> MeterResult:
    """Bill one allocation's line up to `now`, waiting for a concurrent tick to finish."""
    return charge_allocations([allocation_id], now or timezone.now())


def charge_allocations(ids: list[int], now: datetime) -> MeterResult:
    """Bill the lines of these allocations up to `now` (all of each line's allocations: billing is per line)."""
    if not ids:
        return MeterResult()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT l.id FROM workers_allocation a JOIN billing_billingline l ON {OF_LINE}"
            " WHERE a.id = ANY(%s::bigint[]) ORDER BY l.id",
            [int_array(ids)],
        )
        lines = [line for (line,) in cursor.fetchall()]
    return charge_lines(lines, now)


def charge_lines(ids: list[int], now: datetime, *, book: PriceBook | None = None, skip_locked=False) -> MeterResult:
    """Bill `ids` up to `now` in one database transaction; stops out-of-credit jobs after it."""
    if not ids:
        return MeterResult()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # the planner settings last until commit: not to be left in a caller's transaction
            _index_joins()
        lines = _lock(ids, skip_locked)
        if not len(lines):
            return MeterResult()
        allocations = _read_allocations(lines)
        book = book or PriceBook.load(set(lines.chip_type.tolist()))
        _advance(lines, allocations, book, now)
        result = _post(lines, allocations, now)
        if result.shortfalls:
            transaction.on_commit(lambda: _announce_shortfalls(result.shortfalls, now))
    return result


def _index_joins() -> None:
    """Reach rows by their keys for the rest of this database transaction, triggers included.

    A batch touches a known few rows of tables that only grow (lines, allocations, jobs, accounts);
    a hash join would read the whole table once per batch, a nested loop reads just those rows.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)")


def _lock(ids: list[int], skip_locked: bool) -> Lines:
    """Lock the line rows in id order and read them back as columns (one array each)."""
    sql = (
        "WITH locked AS (SELECT l.id, l.job_id, j.owner_id, l.chip_type_id, l.mode, l.billed_through,"
        " l.charged_total, l.chip_seconds, l.settled_owed, l.settled_chip_seconds"
        " FROM billing_billingline l JOIN workers_job j ON j.id = l.job_id"
        " WHERE l.id = ANY(%s::bigint[]) ORDER BY l.id FOR UPDATE OF l" + (" SKIP LOCKED" if skip_locked else "") + ")"
        " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(owner_id::bigint),"
        " array_agg(chip_type_id::bigint), array_agg((mode = %s)::int::bigint), array_agg(billed_through),"
        " array_agg(charged_total), array_agg(chip_seconds), array_agg(settled_owed),"
        " array_agg(settled_chip_seconds) FROM locked"
    )
    lines = columns_of(Lines, _read(sql, [int_array(ids), AllocationMode.SPOT]))
    return lines.take(np.argsort(lines.id, kind="stable"))  # the aggregate's order is not the lock's


def _read_allocations(lines: Lines) -> Allocations:
    """The lines' unsettled allocations, read after the lines' locks (an allocation ended by a committed
    transaction is seen ended). They are not locked: only the meter writes their billing columns.

    They are reached by job (one index scan, whatever the planner knows of the tables) and matched to
    the batch's lines here: a job's allocations of a line another tick holds are left alone.
    """
    sql = (
        "WITH rows AS (SELECT a.id, a.job_id, a.chip_type_id, a.mode, a.chips, a.started_at, a.ended_at"
        f" FROM workers_allocation a WHERE a.job_id = ANY(%s::bigint[]) AND {UNSETTLED})"
        " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(chip_type_id::bigint),"
        " array_agg((mode = %s)::int::bigint), array_agg(chips::bigint), array_agg(started_at),"
        " array_agg(coalesce(ended_at, 'infinity')) FROM rows"
    )
    values = _read(sql, [int_array(np.unique(lines.job)), AllocationMode.SPOT])
    if values[0] is None:
        return columns_of(Allocations, values)
    ids, jobs, chip_types, spot, chips, start, end = values
    row_line = _match_lines(lines, jobs, chip_types, spot)
    mine = row_line >= 0
    return Allocations(ids[mine], row_line[mine], chips[mine], start[mine], end[mine])


def _match_lines(lines: Lines, jobs: np.ndarray, chip_types: np.ndarray, spot: np.ndarray) -> np.ndarray:
    """Each allocation's index among the batch's lines, by (job, chip type, mode); -1 where its line is not one."""
    if (
        max(int(lines.job.max()), int(jobs.max())) < 2**42
        and max(int(lines.chip_type.max()), int(chip_types.max())) < 2**20
    ):
        line_keys = _line_key(lines.job, lines.chip_type, lines.spot)  # lines are sorted by id, not by key
        by_key = np.argsort(line_keys, kind="stable")
        keys = _line_key(jobs, chip_types, spot)
        found = by_key[np.minimum(np.searchsorted(line_keys[by_key], keys), len(by_key) - 1)]
        return np.where(line_keys[found] == keys, found, -1)
    index = {
        key: i
        for i, key in enumerate(zip(lines.job.tolist(), lines.chip_type.tolist(), lines.spot.tolist(), strict=True))
    }
    return np.array(
        [index.get(key, -1) for key in zip(jobs.tolist(), chip_types.tolist(), spot.tolist(), strict=True)],
        dtype=np.int64,
    )


def _line_key(jobs: np.ndarray, chip_types: np.ndarray, spot: np.ndarray) -> np.ndarray:
    """(job, chip type, mode) as one int64, for job ids below 2^42 and chip type ids below 2^20."""
    return (jobs << 21) | (chip_types << 1) | (spot != 0)


def _read(sql: str, params: list) -> tuple:
    # Arrays in PostgreSQL's binary format, read straight into numpy: reading 2,500 rows of
    # timestamps as Python objects cost more than the rest of the read. Same connection, same
    # transaction as Django's cursors.
    connection.ensure_connection()
    with connection.wrap_database_errors, column_cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        return cursor.fetchone()


def _advance(lines: Lines, allocations: Allocations, book: PriceBook, now: datetime) -> None:
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


def _post(lines: Lines, allocations: Allocations, now: datetime) -> MeterResult:
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


def _announce_shortfalls(shortfalls: list[Shortfall], now: datetime) -> None:
    """After commit: each job whose charge its wallet could not cover must stop (billing.signals)."""
    for job_id in sorted({bill.job_id for bill in shortfalls}):
        unpaid = sum(bill.shortfall for bill in shortfalls if bill.job_id == job_id)
        logger.warning("meter: job %s is short of %s", job_id, format_money(unpaid))
        credit_shortfall.send(
            sender=Shortfall,
            job_id=job_id,
            reason=f"Out of credit: {format_money(unpaid)} of usage could not be charged.",
            data={"shortfall": unpaid},
            now=now,
        )
