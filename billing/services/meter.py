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
  `meter:w{wallet}:{tick time in us}:a{first allocation}`) pays all of that wallet's charges; each
  Charge row names it. Batches keep a wallet's allocations together, so a wallet is charged once
  a tick unless it has more allocations than a batch holds.
- A wallet never goes negative. When a wallet cannot cover what its allocations owe, each is
  charged in id order while the balance lasts (the last one partly); the mark still advances, the
  unpaid rest stays visible as `owed - charged_total` (which `manage.py reconcile` reports), and
  after the commit the shortfall is announced (`billing.signals.credit_shortfall`): the job is
  stopped at once by whoever acts on jobs. The stop margin makes this rare: the low-balance check
  (billing.services.holds) asks for a stop minutes before.
- Prices come from `billing.services.pricing.PriceBook`.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from base.money import format_price
from billing.choices import AccountKind, TransactionKind
from billing.models import Account
from billing.notifications import note_balances
from billing.services.ledger import Leg, fingerprint_of, lock_wallets, platform_account, wallet_for
from billing.services.pricing import MICROSECOND, PriceBook
from billing.signals import credit_shortfall
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


def owed(
    book: PriceBook | Integrals, chip_type_id: int, mode: str, chips: int, started_at: datetime, mark: datetime
) -> int:
    """What [started_at, mark) costs, rounded once, half up (the cumulative-exact total)."""
    return round_half_up(chips * book.integral(chip_type_id, mode, started_at, mark), MICROSECONDS_PER_HOUR)


class Integrals:
    """`PriceBook.integral` for the many spans of one batch, from running sums of the book's segments.

    Per chip type and mode, the book's segments over [earliest start, latest end) are summed once;
    the integral over any [start, end) inside is then F(end) - F(start), two bisections instead
    of a walk over the segments. The same integer sum, so `owed` takes it in place of the book.
    """

    def __init__(self, book: PriceBook, spans: dict[tuple[int, str], tuple[datetime, datetime]]):
        self._lines: dict[tuple[int, str], tuple[list[datetime], list[tuple[datetime, datetime, int]], list[int]]] = {}
        for key, (origin, until) in spans.items():
            segments = book.segments(*key, origin, until)
            sums = [0]
            for lo, hi, per_hour in segments:
                sums.append(sums[-1] + per_hour * ((hi - lo) // MICROSECOND))
            self._lines[key] = ([lo for lo, _, _ in segments], segments, sums)

    def integral(self, chip_type_id: int, mode: str, start: datetime, end: datetime) -> int:
        line = self._lines[chip_type_id, mode]
        return self._running(line, end) - self._running(line, start)

    @staticmethod
    def _running(line, at: datetime) -> int:
        """The integral from the line's origin to `at`."""
        starts, segments, sums = line
        index = bisect.bisect_right(starts, at) - 1
        if index < 0:
            return 0
        lo, hi, per_hour = segments[index]
        return sums[index + 1] if at >= hi else sums[index] + per_hour * ((at - lo) // MICROSECOND)


def round_half_up(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half away from zero, in integers (money.round_micros's rule, exactly)."""
    whole, rest = divmod(abs(numerator), denominator)
    whole += 2 * rest >= denominator
    return whole if numerator >= 0 else -whole


@dataclass
class Bill:
    """One allocation's billing state, read under its row lock, and what this tick does to it."""

    id: int
    job_id: int
    owner_id: int
    chip_type_id: int
    mode: str
    chips: int
    started_at: datetime
    ended_at: datetime | None
    billed_through: datetime
    charged_total: int
    mark: datetime = None  # type: ignore[assignment]
    delta: int = 0
    charged: int = 0

    @property
    def seconds(self) -> int:
        return (self.mark - self.billed_through) // SECOND

    @property
    def shortfall(self) -> int:
        return max(self.delta - self.charged, 0)


@dataclass
class MeterResult:
    """What one tick did."""

    allocations: int = 0
    seconds: int = 0
    charged: int = 0
    charges: int = 0
    transactions: int = 0
    shortfalls: list[Bill] = field(default_factory=list)

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
        bills = _lock(ids, skip_locked)
        book = book or PriceBook.load({bill.chip_type_id for bill in bills})
        integrals = _integrals(book, bills, now)
        bills = [bill for bill in bills if _advance(bill, integrals, now)]
        result = _post(bills, now) if bills else MeterResult()
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


def _lock(ids: list[int], skip_locked: bool) -> list[Bill]:
    sql = (
        "SELECT a.id, a.job_id, j.owner_id, a.chip_type_id, a.mode, a.chips, a.started_at, a.ended_at,"
        " a.billed_through, a.charged_total"
        " FROM workers_allocation a JOIN workers_job j ON j.id = a.job_id"
        " WHERE a.id = ANY(%s::bigint[]) ORDER BY a.id FOR UPDATE OF a" + (" SKIP LOCKED" if skip_locked else "")
    )
    # Rows come back in PostgreSQL's binary format: reading 1,000 timestamps as text costs more
    # than the rest of the lock. Same connection, same transaction as Django's cursors.
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, [_int_array(ids)], binary=True)
        return [Bill(*row) for row in cursor.fetchall()]


def _int_array(values) -> str:
    """A PostgreSQL array literal of integers: one short string instead of one parameter per element."""
    return "{" + ",".join(map(str, values)) + "}"


def _integrals(book: PriceBook, bills: list[Bill], now: datetime) -> Integrals:
    """Running price sums for the batch: from each chip type and mode's earliest start to now."""
    spans: dict[tuple[int, str], tuple[datetime, datetime]] = {}
    for bill in bills:
        key = (bill.chip_type_id, bill.mode)
        spans[key] = (min(bill.started_at, spans.get(key, (bill.started_at,))[0]), now)
    return Integrals(book, spans)


def _advance(bill: Bill, book: PriceBook | Integrals, now: datetime) -> bool:
    """Set the new mark and what this tick owes; False when the allocation is billed up to it."""
    until = min(now, bill.ended_at) if bill.ended_at else now
    bill.mark = billing_mark(bill.started_at, until)
    if bill.mark <= bill.billed_through:
        return False
    owed_total = owed(book, bill.chip_type_id, bill.mode, bill.chips, bill.started_at, bill.mark)
    bill.delta = max(owed_total - bill.charged_total, 0)
    return True


def _post(bills: list[Bill], now: datetime) -> MeterResult:
    """Write the batch: a ledger transaction per wallet, a Charge row per paid allocation, the marks."""
    revenue = platform_account(AccountKind.REVENUE)
    wallets = _lock_wallets({bill.owner_id for bill in bills if bill.delta > 0}, revenue)
    _pay(bills, wallets)
    paid = [bill for bill in bills if bill.charged > 0]
    posted = _post_ledger(paid, wallets, revenue, now)
    _save(bills, posted, now)
    # One statement a batch: who fell below their low-balance threshold is e-mailed after the commit.
    spent: dict[int, int] = defaultdict(int)
    for bill in paid:
        spent[bill.owner_id] += bill.charged
    note_balances({owner_id: wallets[owner_id].balance - amount for owner_id, amount in spent.items()})
    return MeterResult(
        allocations=len(bills),
        seconds=sum(bill.seconds * bill.chips for bill in bills),
        charged=sum(bill.charged for bill in paid),
        charges=len(paid),
        transactions=len(posted),
        shortfalls=[bill for bill in bills if bill.shortfall > 0],
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


def _pay(bills: list[Bill], wallets: dict[int, Account]) -> None:
    """Charge each delta in full while the wallet covers it; the one that doesn't gets the rest."""
    left = {owner_id: wallet.balance for owner_id, wallet in wallets.items()}
    for bill in bills:
        if bill.delta > 0:
            bill.charged = min(bill.delta, left[bill.owner_id])
            left[bill.owner_id] -= bill.charged


def _post_ledger(paid: list[Bill], wallets: dict[int, Account], revenue: Account, now: datetime) -> dict[int, int]:
    """One CHARGE transaction per wallet (wallet -> revenue, the sum of its allocations' charges).

    Returns {owner id: transaction id}. The key names the wallet, the tick's time and the batch's
    first allocation of that wallet: no two ticks can produce it (that allocation's mark moves on
    when this one commits), so it never refuses a legitimate tick. What keeps a retry, a second
    beat or a redelivery from charging twice is the allocation rows' marks, re-read under their locks.
    """
    by_owner: dict[int, list[Bill]] = defaultdict(list)
    for bill in paid:
        by_owner[bill.owner_id].append(bill)
    if not by_owner:
        return {}
    tick = (now - EPOCH) // MICROSECOND
    owners, keys, fingerprints, memos, accounts, amounts = [], [], [], [], [], []
    for owner_id, owner_bills in by_owner.items():
        wallet, amount = wallets[owner_id], sum(bill.charged for bill in owner_bills)
        owners.append(owner_id)
        keys.append(f"meter:w{wallet.pk}:{tick}:a{owner_bills[0].id}")
        fingerprints.append(fingerprint_of(TransactionKind.CHARGE, [Leg(wallet, -amount), Leg(revenue, amount)]))
        memos.append(_memo(owner_bills))
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
                _int_array(txns + txns),
                _int_array(accounts + [revenue.pk] * len(txns)),
                _int_array([-amount for amount in amounts] + amounts),
            ],
        )
    return dict(zip(owners, txns, strict=True))


def _memo(bills: list[Bill]) -> str:
    jobs = sorted({bill.job_id for bill in bills})
    named = ", ".join(str(job) for job in jobs[:12]) + (f" and {len(jobs) - 12} more" if len(jobs) > 12 else "")
    chip_seconds = sum(bill.seconds * bill.chips for bill in bills)
    return (
        f"Compute, job{'s' if len(jobs) > 1 else ''} {named}: {chip_seconds:,} chip-second(s)"
        f" on {len(bills)} allocation(s)"
    )[:500]


def _save(bills: list[Bill], posted: dict[int, int], now: datetime) -> None:
    """Advance every bill's mark and charged total, and write a Charge row for each paid one, in one statement.

    Times travel as offsets from the allocation's start: the new mark in whole seconds, the old
    one (where the charge starts) in microseconds.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],"
            " %s::bigint[]) AS v(id, old, whole, seconds, charged, txn)),"
            " moved AS (UPDATE workers_allocation a SET billed_through = a.started_at + v.whole * interval '1 second',"
            " charged_total = a.charged_total + v.charged FROM v WHERE a.id = v.id"
            " RETURNING a.id, a.job_id, a.chip_type_id, a.mode, a.chips,"
            " a.started_at + v.old * interval '1 microsecond' AS started_at, a.billed_through AS ended_at,"
            " v.seconds, v.charged, v.txn)"
            " INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips,"
            " started_at, ended_at, seconds, amount, transaction_id, created_at)"
            " SELECT m.id, m.job_id, j.owner_id, m.chip_type_id, m.mode, m.chips, m.started_at, m.ended_at,"
            " m.seconds, m.charged, m.txn, %s"
            " FROM moved m JOIN workers_job j ON j.id = m.job_id WHERE m.charged > 0 ORDER BY m.id",
            [
                _int_array(bill.id for bill in bills),
                _int_array((bill.billed_through - bill.started_at) // MICROSECOND for bill in bills),
                _int_array((bill.mark - bill.started_at) // SECOND for bill in bills),
                _int_array(bill.seconds for bill in bills),
                _int_array(bill.charged for bill in bills),
                _int_array(posted.get(bill.owner_id, 0) if bill.charged else 0 for bill in bills),
                now,
            ],
        )


def _announce_shortfalls(shortfalls: list[Bill], now: datetime) -> None:
    """After commit: each job whose charge its wallet could not cover must stop (billing.signals)."""
    for job_id in sorted({bill.job_id for bill in shortfalls}):
        unpaid = sum(bill.shortfall for bill in shortfalls if bill.job_id == job_id)
        logger.warning("meter: job %s is short of %s", job_id, format_price(unpaid))
        credit_shortfall.send(
            sender=Bill,
            job_id=job_id,
            reason=f"Out of credit: {format_price(unpaid)} of usage could not be charged.",
            data={"shortfall": unpaid},
            now=now,
        )
