"""The per-second meter: charge each allocation from its billed-through mark up to now.

Rules (issue 4, DESIGN.md section 7):

- The mark only moves in whole seconds from `started_at`: the new mark is `min(now, ended_at)`
  truncated to a whole number of seconds since `started_at`. A fraction of a second at the end
  of an allocation is not billed.
- Cumulative-exact: what an allocation owes up to its mark is
  `round_micros(chips x integral of price_per_hour over [started_at, mark) / 3600 s)`, computed
  from scratch every time, and a tick charges `owed - charged_total`. However many ticks, the
  sum is one rounding of the whole span.
- One database transaction per batch: the allocation rows are locked and re-read, the ledger
  transactions (key `meter:{allocation}:{mark epoch seconds}`), the Charge rows and the advance of
  `billed_through`/`charged_total` commit together or not at all. A retry, a second beat or a
  crashed worker's redelivery re-reads the advanced mark and does nothing.
- A wallet never goes negative. When a wallet cannot cover what its allocations owe, each is
  charged in id order while the balance lasts (the last one partly); the mark still advances, the
  unpaid rest stays visible as `owed - charged_total` (which `manage.py reconcile` reports),
  a `notice` event records the shortfall, and the job is stopped at once. The stop margin makes
  this rare: the low-balance stop (billing.services.holds) acts minutes before.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, localcontext

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from billing.choices import AccountKind, TransactionKind
from billing.models import Account, Charge, Entry, Price, Transaction
from billing.money import format_amount, round_micros
from billing.services.ledger import Leg, fingerprint_of, platform_account, wallet_for
from workers.choices import AllocationMode
from workers.models import Allocation

logger = logging.getLogger(__name__)

SECOND = timedelta(seconds=1)
MICROSECOND = timedelta(microseconds=1)
MICROSECONDS_PER_HOUR = 3600 * 1_000_000
BATCH = 1000


# Prices ---------------------------------------------------------------------------------------


class PriceBook:
    """Price history per chip type, answering "what did a chip-hour cost at t" and over a span.

    Spot allocations pay the spot floor until the spot market's clearing prices exist; that is
    the one place (`_column`) a clearing-price history plugs in.
    """

    def __init__(self, rows: list[tuple[int, datetime, int, int]]):
        self._times: dict[int, list[datetime]] = defaultdict(list)
        self._prices: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for chip_type_id, effective_at, on_demand, spot_floor in sorted(rows, key=lambda r: (r[0], r[1])):
            self._times[chip_type_id].append(effective_at)
            self._prices[chip_type_id].append((on_demand, spot_floor))

    @classmethod
    def load(cls, chip_type_ids=None) -> PriceBook:
        prices = Price.objects.order_by("chip_type_id", "effective_at", "id")
        if chip_type_ids is not None:
            prices = prices.filter(chip_type_id__in=chip_type_ids)
        return cls(
            list(prices.values_list("chip_type_id", "effective_at", "on_demand_per_hour", "spot_floor_per_hour"))
        )

    def price_per_hour(self, chip_type_id: int, mode: str, at: datetime) -> int | None:
        """Micro-units per chip-hour in force at `at` (None before the first price)."""
        index = bisect.bisect_right(self._times[chip_type_id], at) - 1
        return None if index < 0 else self._column(self._prices[chip_type_id][index], mode)

    def segments(
        self, chip_type_id: int, mode: str, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime, int]]:
        """[(from, to, per_hour)] covering [start, end); spans without a price are left out (free)."""
        times, prices = self._times[chip_type_id], self._prices[chip_type_id]
        first = max(bisect.bisect_right(times, start) - 1, 0)
        spans = []
        for index in range(first, len(times)):
            lo = max(start, times[index])
            hi = min(end, times[index + 1]) if index + 1 < len(times) else end
            if lo >= end:
                break
            if hi > lo:
                spans.append((lo, hi, self._column(prices[index], mode)))
        return spans

    def integral(self, chip_type_id: int, mode: str, start: datetime, end: datetime) -> int:
        """Σ per_hour x microseconds over [start, end): exact, in micro-unit-microseconds per hour."""
        return sum(
            per_hour * ((hi - lo) // MICROSECOND) for lo, hi, per_hour in self.segments(chip_type_id, mode, start, end)
        )

    @staticmethod
    def _column(price: tuple[int, int], mode: str) -> int:
        on_demand, spot_floor = price
        return spot_floor if mode == AllocationMode.SPOT else on_demand


def price_per_hour(chip_type_id: int, mode: str, at: datetime) -> int | None:
    """What one chip of this type costs per hour at `at`, in micro-units."""
    return PriceBook.load([chip_type_id]).price_per_hour(chip_type_id, mode, at)


# What is owed ---------------------------------------------------------------------------------


def billing_mark(started_at: datetime, until: datetime) -> datetime:
    """`until` truncated to a whole number of seconds since `started_at` (never before it)."""
    if until <= started_at:
        return started_at
    return started_at + SECOND * ((until - started_at) // SECOND)


def owed(book: PriceBook, chip_type_id: int, mode: str, chips: int, started_at: datetime, mark: datetime) -> int:
    """What [started_at, mark) costs, rounded once (the cumulative-exact total)."""
    numerator = chips * book.integral(chip_type_id, mode, started_at, mark)
    with localcontext(prec=80):  # exact enough that the half-up rule decides every tie correctly
        return round_micros(Decimal(numerator) / MICROSECONDS_PER_HOUR)


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
    shortfalls: list[Bill] = field(default_factory=list)

    def add(self, other: MeterResult) -> None:
        self.allocations += other.allocations
        self.seconds += other.seconds
        self.charged += other.charged
        self.charges += other.charges
        self.shortfalls += other.shortfalls


# Ticks ----------------------------------------------------------------------------------------


def due_allocations():
    """Open allocations, and ended ones not yet billed through their last whole second."""
    return Allocation.objects.filter(Q(ended_at__isnull=True) | Q(billed_through__lte=F("ended_at") - SECOND))


def run_meter(now=None, batch: int = BATCH) -> MeterResult:
    """One beat: charge every due allocation up to `now`. Rows another tick holds are skipped."""
    now = now or timezone.now()
    ids = list(due_allocations().order_by("pk").values_list("pk", flat=True))
    book = PriceBook.load()
    result = MeterResult()
    for start in range(0, len(ids), batch):
        result.add(charge_allocations(ids[start : start + batch], now, book=book, skip_locked=True))
    return result


def charge_allocation(allocation_id: int, now=None) -> MeterResult:
    """Charge one allocation up to `now` (or its end), waiting for a concurrent tick to finish."""
    return charge_allocations([allocation_id], now or timezone.now())


def charge_allocations(
    ids: list[int], now: datetime, *, book: PriceBook | None = None, skip_locked=False
) -> MeterResult:
    """Charge `ids` up to `now` in one database transaction; stops out-of-credit jobs after it."""
    if not ids:
        return MeterResult()
    with transaction.atomic():
        bills = _lock(ids, skip_locked)
        book = book or PriceBook.load({bill.chip_type_id for bill in bills})
        bills = [bill for bill in bills if _advance(bill, book, now)]
        result = _post(bills, now) if bills else MeterResult()
        if result.shortfalls:
            transaction.on_commit(lambda: _stop_unpaid(result.shortfalls, now))
    return result


def _lock(ids: list[int], skip_locked: bool) -> list[Bill]:
    sql = (
        "SELECT a.id, a.job_id, j.owner_id, a.chip_type_id, a.mode, a.chips, a.started_at, a.ended_at,"
        " a.billed_through, a.charged_total"
        " FROM workers_allocation a JOIN workers_job j ON j.id = a.job_id"
        " WHERE a.id = ANY(%s) ORDER BY a.id FOR UPDATE OF a" + (" SKIP LOCKED" if skip_locked else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(ids)])
        return [Bill(*row) for row in cursor.fetchall()]


def _advance(bill: Bill, book: PriceBook, now: datetime) -> bool:
    """Set the new mark and what this tick owes; False when the allocation is billed up to it."""
    until = min(now, bill.ended_at) if bill.ended_at else now
    bill.mark = billing_mark(bill.started_at, until)
    if bill.mark <= bill.billed_through:
        return False
    owed_total = owed(book, bill.chip_type_id, bill.mode, bill.chips, bill.started_at, bill.mark)
    bill.delta = max(owed_total - bill.charged_total, 0)
    return True


def _post(bills: list[Bill], now: datetime) -> MeterResult:
    revenue = platform_account(AccountKind.REVENUE)
    wallets = _lock_wallets({bill.owner_id for bill in bills if bill.delta > 0}, revenue)
    _pay(bills, wallets)
    paid = [bill for bill in bills if bill.charged > 0]
    txns = Transaction.objects.bulk_create([_transaction(bill, wallets, revenue, now) for bill in paid])
    Entry.objects.bulk_create(
        [
            entry
            for bill, txn in zip(paid, txns, strict=True)
            for entry in (
                Entry(transaction=txn, account_id=wallets[bill.owner_id].pk, amount=-bill.charged, created_at=now),
                Entry(transaction=txn, account_id=revenue.pk, amount=bill.charged, created_at=now),
            )
        ],
        # An even batch never splits a transaction's two legs over two INSERTs (the ledger checks
        # balance per statement; see billing migration 0005).
        batch_size=2000,
    )
    Charge.objects.bulk_create(_charge_row(bill, txn, now) for bill, txn in zip(paid, txns, strict=True))
    _save_marks(bills)
    return MeterResult(
        allocations=len(bills),
        seconds=sum(bill.seconds * bill.chips for bill in bills),
        charged=sum(bill.charged for bill in paid),
        charges=len(paid),
        shortfalls=[bill for bill in bills if bill.shortfall > 0],
    )


def _lock_wallets(owner_ids: set[int], revenue: Account) -> dict[int, Account]:
    """Lock the wallets and the revenue account in id order (the ledger's lock order)."""
    for owner_id in owner_ids - set(
        Account.objects.filter(owner_id__in=owner_ids, kind=AccountKind.WALLET, currency=settings.CURRENCY).values_list(
            "owner_id", flat=True
        )
    ):
        wallet_for(_user(owner_id))
    accounts = Account.objects.select_for_update().filter(
        Q(owner_id__in=owner_ids, kind=AccountKind.WALLET, currency=settings.CURRENCY) | Q(pk=revenue.pk)
    )
    return {account.owner_id: account for account in accounts.order_by("pk") if account.owner_id}


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


def _transaction(bill: Bill, wallets: dict[int, Account], revenue: Account, now: datetime) -> Transaction:
    legs = [Leg(wallets[bill.owner_id], -bill.charged), Leg(revenue, bill.charged)]
    return Transaction(
        idempotency_key=f"meter:{bill.id}:{int(bill.mark.timestamp())}",
        fingerprint=fingerprint_of(TransactionKind.CHARGE, legs),
        kind=TransactionKind.CHARGE,
        memo=f"Job {bill.job_id}: {bill.seconds}s x {bill.chips} chip(s), allocation {bill.id}",
        created_at=now,
    )


def _charge_row(bill: Bill, txn: Transaction, now: datetime) -> Charge:
    return Charge(
        allocation_id=bill.id,
        job_id=bill.job_id,
        owner_id=bill.owner_id,
        chip_type_id=bill.chip_type_id,
        mode=bill.mode,
        chips=bill.chips,
        started_at=bill.billed_through,
        ended_at=bill.mark,
        seconds=bill.seconds,
        amount=bill.charged,
        transaction=txn,
        created_at=now,
    )


def _save_marks(bills: list[Bill]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workers_allocation a SET billed_through = v.mark, charged_total = a.charged_total + v.charged"
            " FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::timestamptz[]) AS mark,"
            " unnest(%s::bigint[]) AS charged) v WHERE a.id = v.id",
            [[b.id for b in bills], [b.mark for b in bills], [b.charged for b in bills]],
        )


def _stop_unpaid(shortfalls: list[Bill], now: datetime) -> None:
    # Imported here: holds uses the job services, which end allocations through this module.
    from billing.services.holds import stop_for_credit

    for job_id in sorted({bill.job_id for bill in shortfalls}):
        unpaid = sum(bill.shortfall for bill in shortfalls if bill.job_id == job_id)
        logger.warning("meter: job %s is short of %s", job_id, format_amount(unpaid))
        stop_for_credit(
            job_id,
            f"Out of credit: {settings.CURRENCY_SYMBOL}{format_amount(unpaid)} of usage could not be charged.",
            data={"shortfall": unpaid},
            now=now,
        )
