"""Statements: usage totals from charges, the wallet's history per month, and the spend rate now.

Money stays in integer micro-units here; pages, CSV and the API format it at the edge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.choices import AccountKind, TransactionKind
from billing.models import BillingLine, Charge, Entry
from billing.services.ledger import balance_of
from billing.services.pricing import PriceBook
from fleet.models import Allocation
from kernel.money import seconds_covered


class StatementError(ValueError):
    """A period or grouping that cannot be reported; the message is safe to show to the user."""


class UsageGroup:
    JOB = "job"
    CHIP = "chip"
    DAY = "day"
    CHOICES = (JOB, CHIP, DAY)


EARLIEST_DAY, LATEST_DAY = date(2000, 1, 1), date(2999, 12, 31)
MONTH_PATTERN = re.compile(r"^(\d{4})-(\d{2})$")


# ---------------------------------------------------------------- periods


@dataclass(frozen=True)
class Period:
    """Whole days [since, until] (both inclusive, local time); either end may be open."""

    since: date | None = None
    until: date | None = None

    @property
    def start(self) -> datetime | None:
        return _start_of(self.since) if self.since else None

    @property
    def end(self) -> datetime | None:
        """The first instant after the period."""
        return _start_of(self.until + timedelta(days=1)) if self.until else None


ALL_TIME = Period()


def _start_of(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def parse_day(value: str | None, name: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise StatementError(
            _("'%(value)s' is not a date for %(name)s: use YYYY-MM-DD.") % {"value": value, "name": name}
        ) from None


def parse_period(since: str | None, until: str | None) -> Period:
    """A period from query-string dates ("2026-03-01"); refuses bad dates and since after until."""
    period = Period(parse_day(since, "since"), parse_day(until, "until"))
    check_period(period)
    return period


def check_period(period: Period) -> None:
    for day in (period.since, period.until):
        if day and not EARLIEST_DAY <= day <= LATEST_DAY:
            raise StatementError(
                _("%(day)s is out of range: use a date from %(earliest)s to %(latest)s.")
                % {"day": day, "earliest": EARLIEST_DAY, "latest": LATEST_DAY}
            )
    if period.since and period.until and period.since > period.until:
        raise StatementError(
            _("The start date %(since)s is after the end date %(until)s.")
            % {"since": period.since, "until": period.until}
        )


def parse_month(value: str) -> Period:
    """The whole calendar month named "YYYY-MM"."""
    match = MONTH_PATTERN.match(value or "")
    if not match:
        raise StatementError(_("'%(value)s' is not a month: use YYYY-MM, for example 2026-03.") % {"value": value})
    year, month = int(match[1]), int(match[2])
    if not 1 <= month <= 12 or not EARLIEST_DAY.year <= year <= LATEST_DAY.year:
        raise StatementError(_("'%(value)s' is not a month: use YYYY-MM, for example 2026-03.") % {"value": value})
    first = date(year, month, 1)
    next_first = date(year + (month == 12), month % 12 + 1, 1)
    return Period(first, next_first - timedelta(days=1))


def parse_group(value: str | None) -> str:
    group = value or UsageGroup.JOB
    if group not in UsageGroup.CHOICES:
        raise StatementError(
            _("Unknown group '%(group)s': use one of %(choices)s.")
            % {"group": group, "choices": ", ".join(UsageGroup.CHOICES)}
        )
    return group


# ---------------------------------------------------------------- usage


@dataclass(frozen=True)
class UsageRow:
    """Charged usage for one job, chip type or day."""

    key: str
    label: str
    seconds: int
    chip_seconds: int
    amount: int

    @property
    def chip_hours(self) -> Decimal:
        return (Decimal(self.chip_seconds) / 3600).quantize(Decimal("0.001"))


def job_charged(job) -> int:
    """What a job has been charged so far: all its billing lines, every epoch (micro-units)."""
    return BillingLine.objects.filter(job=job).aggregate(total=Sum("charged_total"))["total"] or 0


def charged_of_job(job: str = "pk") -> Subquery:
    """What a job was charged, as a subquery on the outer query's `job` field: no GROUP BY over the
    jobs, so their ordering holds and a page's COUNT stays a plain one. None for a job never billed."""
    totals = BillingLine.objects.filter(job=OuterRef(job)).order_by().values("job").annotate(total=Sum("charged_total"))
    return Subquery(totals.values("total"))


def charges_for(user, period: Period = ALL_TIME) -> QuerySet[Charge]:
    """The user's charges that ended inside the period (a charge belongs to the day it ended)."""
    return charges_for_everyone(period).filter(owner=user)


def charges_for_everyone(period: Period) -> QuerySet[Charge]:
    """Every user's charges that ended inside the period (operator reports)."""
    charges = Charge.objects.all()
    if period.start:
        charges = charges.filter(ended_at__gte=period.start)
    if period.end:
        charges = charges.filter(ended_at__lt=period.end)
    return charges


def usage_rows(charges: QuerySet[Charge], group: str) -> list[UsageRow]:
    """Charged seconds, chip-seconds and amount per job, chip type or day; sums to the charged total."""
    group = parse_group(group)
    # Named apart from the fields, so "seconds" still means the column, not the sum.
    totals = {
        "sum_seconds": Sum("seconds"),
        "sum_chip_seconds": Sum("chip_seconds"),
        "sum_amount": Sum("amount"),
    }
    charges = charges.order_by()
    if group == UsageGroup.JOB:
        rows = charges.values("job_id", "job__name", "job__model_name").annotate(**totals).order_by("-job_id")
        return [_row(str(r["job_id"]), _job_label(r), r) for r in rows]
    if group == UsageGroup.CHIP:
        rows = charges.values("chip_type__slug", "chip_type__name", "chip_type__sort_order").annotate(**totals)
        rows = rows.order_by("chip_type__sort_order", "chip_type__slug")
        return [_row(r["chip_type__slug"], r["chip_type__name"], r) for r in rows]
    day = TruncDate("ended_at", tzinfo=timezone.get_current_timezone())
    rows = charges.annotate(day=day).values("day").annotate(**totals).order_by("day")
    return [_row(r["day"].isoformat(), r["day"].isoformat(), r) for r in rows]


def _job_label(row: dict) -> str:
    return _("Job %(id)s · %(name)s") % {"id": row["job_id"], "name": row["job__name"] or row["job__model_name"]}


def _row(key: str, label: str, row: dict) -> UsageRow:
    return UsageRow(key, label, row["sum_seconds"] or 0, row["sum_chip_seconds"] or 0, row["sum_amount"] or 0)


def total_of(rows: Iterable[UsageRow]) -> int:
    return sum(row.amount for row in rows)


# ---------------------------------------------------------------- ledger


def wallet_entries(user) -> QuerySet[Entry]:
    return Entry.objects.filter(
        account__owner=user, account__kind=AccountKind.WALLET, account__currency=settings.CURRENCY
    ).select_related("transaction")


def balance_before(user, instant: datetime | None) -> int:
    """The wallet balance just before `instant` (the current balance when None)."""
    if instant is None:
        return balance_of(user)
    return wallet_entries(user).filter(created_at__lt=instant).aggregate(total=Sum("amount", default=0))["total"]


def entries_in(user, period: Period) -> QuerySet[Entry]:
    entries = wallet_entries(user)
    if period.start:
        entries = entries.filter(created_at__gte=period.start)
    if period.end:
        entries = entries.filter(created_at__lt=period.end)
    return entries.order_by("created_at", "id")


# ---------------------------------------------------------------- monthly statement


@dataclass(frozen=True)
class Movement:
    """The total of one kind of transaction in the month (top-ups, compute, refunds, ...)."""

    kind: str
    label: str
    amount: int


@dataclass
class MonthlyStatement:
    """Opening balance + movements = closing balance, with the entries and usage behind them."""

    period: Period
    opening: int
    closing: int
    movements: list[Movement]
    payments: list[Entry] = field(default_factory=list)
    refunds: list[Entry] = field(default_factory=list)
    usage_by_job: list[UsageRow] = field(default_factory=list)
    usage_by_chip: list[UsageRow] = field(default_factory=list)

    @property
    def net(self) -> int:
        return sum(movement.amount for movement in self.movements)

    @property
    def usage_total(self) -> int:
        return total_of(self.usage_by_job)


def monthly_statement(user, month: str) -> MonthlyStatement:
    period = parse_month(month)
    entries = list(entries_in(user, period))
    by_kind: dict[str, int] = {}
    for entry in entries:
        by_kind[entry.transaction.kind] = by_kind.get(entry.transaction.kind, 0) + entry.amount
    labels = dict(TransactionKind.choices)
    # Usage is counted by its ledger transaction's time, so it matches the compute line to the micro.
    charges = Charge.objects.filter(
        owner=user, transaction__created_at__gte=period.start, transaction__created_at__lt=period.end
    ).select_related("job", "chip_type")
    return MonthlyStatement(
        period=period,
        opening=balance_before(user, period.start),
        closing=balance_before(user, period.end),
        movements=[Movement(kind, labels[kind], by_kind[kind]) for kind in TransactionKind.values if kind in by_kind],
        payments=[e for e in entries if e.transaction.kind == TransactionKind.TOPUP],
        refunds=[e for e in entries if e.transaction.kind == TransactionKind.REFUND],
        usage_by_job=usage_rows(charges, UsageGroup.JOB),
        usage_by_chip=usage_rows(charges, UsageGroup.CHIP),
    )


def statement_months(user, now: datetime | None = None) -> list[str]:
    """Every month from the wallet's first entry to now, newest first ("2026-03")."""
    now = timezone.localtime(now or timezone.now())
    first = wallet_entries(user).order_by("created_at").values_list("created_at", flat=True).first()
    if first is None:
        return [f"{now:%Y-%m}"]
    first = timezone.localtime(first)
    months, year, month = [], now.year, now.month
    while (year, month) >= (first.year, first.month):
        months.append(f"{year:04d}-{month:02d}")
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return months


# ---------------------------------------------------------------- spend rate


@dataclass(frozen=True)
class SpendRate:
    """What the user's open allocations cost per hour at today's prices, and how long the balance lasts."""

    per_hour: int
    balance: int

    @property
    def lasts_seconds(self) -> float | None:
        return seconds_covered(self.balance, self.per_hour)


def allocation_rate(allocation: Allocation, book: PriceBook, now: datetime) -> int:
    """Micro-units per hour at `now`: chips × what the meter charges a chip of this mode."""
    return allocation.chips * (book.price_per_hour(allocation.chip_type_id, allocation.mode, now) or 0)


def spend_rate(user, now: datetime | None = None) -> SpendRate:
    now = now or timezone.now()
    allocations = list(Allocation.objects.open().filter(job__owner=user))
    book = PriceBook.load({a.chip_type_id for a in allocations})
    return SpendRate(sum(allocation_rate(a, book, now) for a in allocations), balance_of(user))
