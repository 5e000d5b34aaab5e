"""The per-second meter: charge each allocation from its billed-through mark up to now.

Rules:

- The mark only moves in whole seconds from `started_at`: the new mark is `min(now, ended_at)`
  truncated to a whole number of seconds since `started_at`. A fraction of a second at the end
  of an allocation is not billed.
- Cumulative-exact: what an allocation owes up to its mark is
  `round_micros(chips x integral of price_per_hour over [started_at, mark) / 3600 s)`, computed
  from scratch every time, and a tick charges `owed - charged_total`. However many ticks, the
  sum is one rounding of the whole span.
- One database transaction per batch: the allocation rows are locked and re-read, the ledger
  transactions, the Charge rows and the advance of `billed_through`/`charged_total` commit
  together or not at all. A retry, a second beat or a crashed worker's redelivery re-reads the
  advanced mark and does nothing.
- One ledger transaction per wallet per batch (wallet -> revenue, key
  `meter:w{wallet}:{tick time in us}:a{first allocation}`) pays all of that wallet's charges; the
  tick's Charge rows, one per billing line (a job's allocations of one chip type and mode), name
  it. Batches keep a wallet's allocations together, so a wallet is charged once a tick unless it
  has more allocations than a batch holds.
- A wallet never goes negative. When a wallet cannot cover what its allocations owe, each is
  charged in id order while the balance lasts (the last one partly); the mark still advances, the
  unpaid rest stays visible as `owed - charged_total` (which `manage.py reconcile` reports), and
  after the commit the shortfall is announced (`billing.signals.credit_shortfall`): the job is
  stopped at once by whoever acts on jobs. The stop margin makes this rare: the low-balance check
  (billing.services.holds) asks for a stop minutes before.
- Prices come from `billing.services.pricing.PriceBook`. A batch is read and priced as numpy columns
  (`billing.services.meter_columns`), to the micro-unit, exactly as `owed` prices one allocation.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime, timedelta

import numpy as np
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from base.money import format_price
from billing.choices import AccountKind, TransactionKind
from billing.models import Account
from billing.notifications import note_balances
from billing.services.ledger import Leg, fingerprint_of, lock_wallets, platform_account, wallet_for
from billing.services.meter_columns import US, PriceLines, column_cursor, from_us, int_array, to_us
from billing.services.pricing import MICROSECOND, PriceBook
from billing.signals import credit_shortfall
from workers.choices import AllocationMode
from workers.models import Allocation

logger = logging.getLogger(__name__)

SECOND = timedelta(seconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECONDS_PER_HOUR = 3600 * 1_000_000
BATCH = 2500  # allocations per database transaction: a batch holds its rows and wallets locked ~0.2 s


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


@dataclass
class Batch:
    """One batch's allocations as columns (int64; times in microseconds since 1970), read under
    their row locks, and what this tick does to them: the new mark, what is owed beyond what was
    charged (`delta`) and what the wallet paid of it (`charged`)."""

    id: np.ndarray
    job: np.ndarray
    owner: np.ndarray
    chip_type: np.ndarray
    spot: np.ndarray
    chips: np.ndarray
    start: np.ndarray
    end: np.ndarray  # NO_END while open
    billed: np.ndarray
    charged_total: np.ndarray
    mark: np.ndarray | None = None
    delta: np.ndarray | None = None
    charged: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.id)

    def take(self, rows: np.ndarray) -> Batch:
        return Batch(**{name: None if column is None else column[rows] for name, column in vars(self).items()})

    @property
    def seconds(self) -> np.ndarray:
        return (self.mark - self.billed) // US


@dataclass(frozen=True)
class Shortfall:
    """An allocation whose charge its wallet could not cover in full this tick."""

    allocation_id: int
    job_id: int
    owner_id: int
    shortfall: int


@dataclass
class MeterResult:
    """What one tick did."""

    allocations: int = 0  # allocations with a new whole second
    seconds: int = 0  # chip-seconds
    charged: int = 0
    charges: int = 0  # allocations charged (a billing line's share one Charge row)
    transactions: int = 0
    shortfalls: list[Shortfall] = field(default_factory=list)

    def add(self, other: MeterResult) -> None:
        self.allocations += other.allocations
        self.seconds += other.seconds
        self.charged += other.charged
        self.charges += other.charges
        self.transactions += other.transactions
        self.shortfalls += other.shortfalls


# Ticks ----------------------------------------------------------------------------------------


def due_allocations(now: datetime | None = None):
    """Open allocations, and ended ones not yet billed through their last whole second.

    With `now`, only those with a whole second to bill by then (a mark is a whole number of
    seconds from the start, so the next one is `billed_through + 1 s`).
    """
    due = Allocation.objects.filter(Q(ended_at__isnull=True) | Q(billed_through__lte=F("ended_at") - SECOND))
    return due.filter(billed_through__lte=now - SECOND) if now is not None else due


def run_meter(now=None, batch: int = BATCH) -> MeterResult:
    """One beat: charge every due allocation up to `now`. Rows another tick holds are skipped.

    Batches hold whole wallets where they can (allocations by owner, then id), so that a wallet
    gets one ledger transaction a tick.
    """
    now = now or timezone.now()
    rows = list(due_allocations(now).order_by("job__owner_id", "pk").values_list("pk", "job__owner_id"))
    book = PriceBook.load()
    result = MeterResult()
    for ids in _batches(rows, batch):
        result.add(charge_allocations(ids, now, book=book, skip_locked=True))
    return result


def _batches(rows: list[tuple[int, int]], size: int) -> list[list[int]]:
    """Allocation ids in batches of about `size`, cut between owners (an owner with more than `size` is split)."""
    by_owner: dict[int, list[int]] = defaultdict(list)
    for pk, owner_id in rows:
        by_owner[owner_id].append(pk)
    batches: list[list[int]] = [[]]
    for ids in by_owner.values():
        if batches[-1] and len(batches[-1]) + len(ids) > size:
            batches.append([])
        for start in range(0, len(ids), size):
            if len(batches[-1]) >= size:
                batches.append([])
            batches[-1].extend(ids[start : start + size])
    return [ids for ids in batches if ids]


def charge_allocation(allocation_id: int, now=None) -> MeterResult:
    """Charge one allocation up to `now` (or its end), waiting for a concurrent tick to finish."""
    return charge_allocations([allocation_id], now or timezone.now())


def charge_allocations(
    ids: list[int], now: datetime, *, book: PriceBook | None = None, skip_locked=False
) -> MeterResult:
    """Charge `ids` up to `now` in one database transaction; stops out-of-credit jobs after it."""
    if not ids:
        return MeterResult()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # the planner settings last until commit: not to be left in a caller's transaction
            _index_joins()
        batch = _lock(ids, skip_locked)
        book = book or PriceBook.load(set(batch.chip_type.tolist()))
        batch = _advance(batch, book, now)
        result = _post(batch, now) if len(batch) else MeterResult()
        if result.shortfalls:
            transaction.on_commit(lambda: _announce_shortfalls(result.shortfalls, now))
    return result


def _index_joins() -> None:
    """Reach rows by their keys for the rest of this database transaction, triggers included.

    A batch touches a known few rows of tables that only grow (allocations, jobs, accounts); a
    hash join would read the whole table once per batch, a nested loop reads just those rows.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)")


def _lock(ids: list[int], skip_locked: bool) -> Batch:
    """Lock the allocation rows in id order and read them back as columns (one array each)."""
    sql = (
        "WITH locked AS (SELECT a.id, a.job_id, j.owner_id, a.chip_type_id, a.mode, a.chips, a.started_at,"
        " a.ended_at, a.billed_through, a.charged_total"
        " FROM workers_allocation a JOIN workers_job j ON j.id = a.job_id"
        " WHERE a.id = ANY(%s::bigint[]) ORDER BY a.id FOR UPDATE OF a" + (" SKIP LOCKED" if skip_locked else "") + ")"
        " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(owner_id::bigint),"
        " array_agg(chip_type_id::bigint), array_agg((mode = %s)::int::bigint), array_agg(chips::bigint),"
        " array_agg(started_at), array_agg(coalesce(ended_at, 'infinity')), array_agg(billed_through),"
        " array_agg(charged_total) FROM locked"
    )
    # Arrays in PostgreSQL's binary format, read straight into numpy: reading 2,500 rows of
    # timestamps as Python objects cost more than the rest of the lock. Same connection, same
    # transaction as Django's cursors.
    connection.ensure_connection()
    with connection.wrap_database_errors, column_cursor(connection.connection) as cursor:
        cursor.execute(sql, [int_array(ids), AllocationMode.SPOT], binary=True)
        columns = cursor.fetchone()
    if columns[0] is None:
        read = [column.name for column in fields(Batch) if column.default is MISSING]
        return Batch(**{name: np.empty(0, dtype=np.int64) for name in read})
    batch = Batch(*columns)
    return batch.take(np.argsort(batch.id, kind="stable"))  # the aggregate's order is not the lock's


def _advance(batch: Batch, book: PriceBook, now: datetime) -> Batch:
    """The rows with a new whole second to bill, each with its new mark and what it owes beyond its charged total."""
    now_us = to_us(now)
    until = np.minimum(batch.end, now_us)
    batch.mark = np.where(until > batch.start, batch.start + (until - batch.start) // US * US, batch.start)
    batch = batch.take(batch.mark > batch.billed)
    owed_total = np.empty(len(batch), dtype=np.int64)
    groups = [(_line(chip_type, spot), rows) for (chip_type, spot), rows in _line_rows(batch.chip_type, batch.spot)]
    # Each line's running price sums, from its earliest start in the batch to now.
    lines = PriceLines(book, {key: (from_us(batch.start[rows].min()), now) for key, rows in groups})
    for key, rows in groups:
        chips, start, mark = batch.chips[rows], batch.start[rows], batch.mark[rows]
        if lines.fits(chips):
            owed_total[rows] = lines.owed(key, chips, start, mark)
        else:  # prices or spans too large for int64 halves: Python's integers, one allocation at a time
            owed_total[rows] = [
                owed(book, *key, int(c), from_us(s), from_us(m)) for c, s, m in zip(chips, start, mark, strict=True)
            ]
    batch.delta = np.maximum(owed_total - batch.charged_total, 0)
    return batch


def _line(chip_type: int, spot: int) -> tuple[int, str]:
    return int(chip_type), AllocationMode.SPOT if spot else AllocationMode.ON_DEMAND


def _line_rows(chip_types: np.ndarray, spot: np.ndarray):
    """((chip type, spot), row indices) for each price line present."""
    codes = chip_types * 2 + (spot != 0)
    for code in np.unique(codes):
        yield (int(code) // 2, int(code) % 2), np.flatnonzero(codes == code)


def _post(batch: Batch, now: datetime) -> MeterResult:
    """Write the batch: a ledger transaction per wallet, a Charge row per billing line paid, the marks."""
    revenue = platform_account(AccountKind.REVENUE)
    wallets = _lock_wallets(set(batch.owner[batch.delta > 0].tolist()), revenue)
    batch.charged = _pay(batch, wallets)
    paid = batch.take(np.flatnonzero(batch.charged > 0))
    by_owner = [(owner, paid.take(rows)) for owner, rows in _rows_by_owner(paid.owner)]
    posted = _post_ledger(by_owner, wallets, revenue, now)
    _save(batch, posted, now)
    # One statement a batch: who fell below their low-balance threshold is e-mailed after the commit.
    note_balances({owner: wallets[owner].balance - int(bills.charged.sum()) for owner, bills in by_owner})
    short = np.flatnonzero(batch.delta > batch.charged)
    return MeterResult(
        allocations=len(batch),
        seconds=int((batch.seconds * batch.chips).sum()),
        charged=int(paid.charged.sum()),
        charges=len(paid),
        transactions=len(posted),
        shortfalls=[
            Shortfall(int(batch.id[i]), int(batch.job[i]), int(batch.owner[i]), int(batch.delta[i] - batch.charged[i]))
            for i in short
        ],
    )


def _lock_wallets(owner_ids: set[int], revenue: Account) -> dict[int, Account]:
    """Lock the wallets and the revenue account in id order (the ledger's lock order)."""
    wallets = lock_wallets(owner_ids, revenue)
    if missing := owner_ids - wallets.keys():  # a first charge: the wallet is created, then locked
        for owner_id in missing:
            wallet_for(_user(owner_id))
        wallets = lock_wallets(owner_ids, revenue)
    return wallets


def _user(owner_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=owner_id)


def _pay(batch: Batch, wallets: dict[int, Account]) -> np.ndarray:
    """What each row is charged: its delta in full while the wallet covers it, in id order; the one
    that doesn't fit gets the rest, the ones after it nothing."""
    order = np.lexsort((batch.id, batch.owner))
    owner, delta = batch.owner[order], batch.delta[order]
    # What the owner's earlier rows (in id order) asked for before each row.
    asked = np.cumsum(delta)
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    before = asked - delta - np.repeat(asked[first] - delta[first], np.diff(np.r_[first, len(owner)]))
    balance = np.array([wallets[o].balance if o in wallets else 0 for o in owner.tolist()], dtype=np.int64)
    charged = np.empty_like(delta)
    charged[order] = np.clip(np.minimum(delta, balance - before), 0, None)
    return charged


def _post_ledger(
    by_owner: list[tuple[int, Batch]], wallets: dict[int, Account], revenue: Account, now: datetime
) -> dict[int, int]:
    """One CHARGE transaction per wallet (wallet -> revenue, the sum of its allocations' charges).

    Returns {owner id: transaction id}. The key names the wallet, the tick's time and the batch's
    first allocation of that wallet: no two ticks can produce it (that allocation's mark moves on
    when this one commits), so it never refuses a legitimate tick. What keeps a retry, a second
    beat or a redelivery from charging twice is the allocation rows' marks, re-read under their locks.
    """
    if not by_owner:
        return {}
    tick = (now - EPOCH) // MICROSECOND
    owners, keys, fingerprints, memos, accounts, amounts = [], [], [], [], [], []
    for owner_id, bills in by_owner:
        wallet, amount = wallets[owner_id], int(bills.charged.sum())
        owners.append(owner_id)
        keys.append(f"meter:w{wallet.pk}:{tick}:a{bills.id[0]}")
        fingerprints.append(fingerprint_of(TransactionKind.CHARGE, [Leg(wallet, -amount), Leg(revenue, amount)]))
        memos.append(_memo(bills))
        accounts.append(wallet.pk)
        amounts.append(amount)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_transaction (idempotency_key, fingerprint, kind, memo, created_at)"
            " SELECT key, fingerprint, %s, memo, %s FROM unnest(%s::text[], %s::text[], %s::text[])"
            " AS v(key, fingerprint, memo) RETURNING idempotency_key, id",
            [TransactionKind.CHARGE, now, keys, fingerprints, memos],
        )
        ids = dict(cursor.fetchall())
        txns = [ids[key] for key in keys]
        # Both legs of every transaction in one INSERT: the ledger checks balance per statement (migration 0005).
        cursor.execute(
            "INSERT INTO billing_entry (transaction_id, account_id, amount, created_at)"
            " SELECT txn, account, amount, %s FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[])"
            " AS v(txn, account, amount)",
            [
                now,
                int_array(txns + txns),
                int_array(accounts + [revenue.pk] * len(txns)),
                int_array([-amount for amount in amounts] + amounts),
            ],
        )
    return dict(zip(owners, txns, strict=True))


def _rows_by_owner(owners: np.ndarray):
    """(owner id, its row indices in id order) for each owner, owners in the order of their first row."""
    unique, first, inverse = np.unique(owners, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(unique)))
    groups = np.split(order, bounds[:-1])
    for index in np.argsort(first, kind="stable"):
        yield int(unique[index]), groups[index]


def _memo(bills: Batch) -> str:
    jobs = sorted(set(bills.job.tolist()))
    named = ", ".join(str(job) for job in jobs[:12]) + (f" and {len(jobs) - 12} more" if len(jobs) > 12 else "")
    chip_seconds = int((bills.seconds * bills.chips).sum())
    return (
        f"Compute, job{'s' if len(jobs) > 1 else ''} {named}: {chip_seconds:,} chip-second(s)"
        f" on {len(bills)} allocation(s)"
    )[:500]


def _save(batch: Batch, posted: dict[int, int], now: datetime) -> None:
    """Advance every row's mark and charged total, and write a Charge row for each billing line and
    paying transaction, in one statement.

    A line is one job's allocations of one chip type and mode; its row covers the earliest old mark
    to the latest new mark of its paid allocations, with their chips, chip-seconds and charges
    summed. Times travel as offsets from the allocation's start: the new mark in whole seconds, the
    old one (where the charge starts) in microseconds.
    """
    paid = batch.charged > 0
    txns = np.array([posted.get(owner, 0) for owner in batch.owner.tolist()], dtype=np.int64)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],"
            " %s::bigint[]) AS v(id, old, whole, seconds, charged, txn)),"
            " moved AS (UPDATE workers_allocation a SET billed_through = a.started_at + v.whole * interval '1 second',"
            " charged_total = a.charged_total + v.charged FROM v WHERE a.id = v.id"
            " RETURNING a.job_id, a.chip_type_id, a.mode, a.chips,"
            " a.started_at + v.old * interval '1 microsecond' AS started_at, a.billed_through AS ended_at,"
            " v.seconds, v.charged, v.txn)"
            " INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips,"
            " started_at, ended_at, seconds, chip_seconds, amount, transaction_id, created_at)"
            " SELECT NULL, m.job_id, j.owner_id, m.chip_type_id, m.mode, sum(m.chips), min(m.started_at),"
            " max(m.ended_at), max(m.seconds), sum(m.chips::bigint * m.seconds), sum(m.charged), m.txn, %s"
            " FROM moved m JOIN workers_job j ON j.id = m.job_id WHERE m.charged > 0"
            " GROUP BY m.job_id, j.owner_id, m.chip_type_id, m.mode, m.txn ORDER BY m.job_id, m.chip_type_id, m.mode",
            [
                int_array(batch.id),
                int_array(batch.billed - batch.start),
                int_array((batch.mark - batch.start) // US),
                int_array(batch.seconds),
                int_array(batch.charged),
                int_array(np.where(paid, txns, 0)),
                now,
            ],
        )


def _announce_shortfalls(shortfalls: list[Shortfall], now: datetime) -> None:
    """After commit: each job whose charge its wallet could not cover must stop (billing.signals)."""
    for job_id in sorted({bill.job_id for bill in shortfalls}):
        unpaid = sum(bill.shortfall for bill in shortfalls if bill.job_id == job_id)
        logger.warning("meter: job %s is short of %s", job_id, format_price(unpaid))
        credit_shortfall.send(
            sender=Shortfall,
            job_id=job_id,
            reason=f"Out of credit: {format_price(unpaid)} of usage could not be charged.",
            data={"shortfall": unpaid},
            now=now,
        )
