"""Operator reports in the admin: revenue per chip type and day, open allocations, payments and refunds.

They are plain admin views (staff only, through `admin_view`) under /admin/billing-reports/, linked
from a box on the admin index. `install()` runs once, when billing/admin.py imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.contrib import admin
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from base.formatting import format_duration
from base.templatetags.money import money_html
from billing.choices import AccountKind
from billing.models import Account, BillingLine, Payment, Refund
from billing.services.pricing import PriceBook
from billing.services.statements import (
    Period,
    SpendRate,
    StatementError,
    allocation_rate,
    charges_for_everyone,
    parse_period,
)
from fleet.models import Allocation
from kernel.money import format_price

REVENUE_DAYS = 30
RECENT_LIMIT = 50
OPEN_LIMIT = 500
REPORTS = [
    ("billing_report_revenue", _("Revenue per chip type and day")),
    ("billing_report_open", _("Open allocations and their spend rate")),
    ("billing_report_payments", _("Recent payments and refunds")),
]


def _render(request: HttpRequest, template: str, title: str, context: dict, status: int = 200) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": title, "reports": REPORTS, **context}
    return TemplateResponse(request, f"portal/statements/{template}", context, status=status)


# ---------------------------------------------------------------- revenue


@dataclass(frozen=True)
class RevenueLine:
    """Compute revenue from one chip type on one day."""

    day: date
    chip: str
    chip_hours: str
    amount: str  # safe HTML: cents, the exact amount on hover


def revenue_period(request: HttpRequest) -> Period:
    since, until = request.GET.get("since"), request.GET.get("until")
    if since or until:
        return parse_period(since, until)
    today = timezone.localdate()
    return Period(today - timedelta(days=REVENUE_DAYS - 1), today)


def revenue_view(request: HttpRequest) -> HttpResponse:
    title = _("Revenue per chip type and day")
    try:
        period = revenue_period(request)
    except StatementError as error:
        return _render(request, "admin_revenue.html", title, {"error": str(error)}, status=400)
    charges = charges_for_everyone(period).order_by()
    day = TruncDate("ended_at", tzinfo=timezone.get_current_timezone())
    rows = (
        charges.annotate(day=day)
        .values("day", "chip_type__slug")
        .annotate(total_chip_seconds=Sum("chip_seconds"), amount=Sum("amount"))
        .order_by("-day", "chip_type__slug")
    )
    lines = [
        RevenueLine(r["day"], r["chip_type__slug"], f"{r['total_chip_seconds'] / 3600:.3f}", money_html(r["amount"]))
        for r in rows
    ]
    by_chip = charges.values("chip_type__slug").annotate(amount=Sum("amount")).order_by("chip_type__slug")
    context = {
        "since": period.since.isoformat() if period.since else "",
        "until": period.until.isoformat() if period.until else "",
        "lines": lines,
        "by_chip": [(r["chip_type__slug"], money_html(r["amount"])) for r in by_chip],
        "total": money_html(charges.aggregate(total=Sum("amount", default=0))["total"]),
    }
    return _render(request, "admin_revenue.html", title, context)


# ---------------------------------------------------------------- open allocations


@dataclass(frozen=True)
class OpenAllocationLine:
    """One running allocation, what it costs per hour now and how long its owner's balance lasts."""

    allocation: Allocation
    rate: str
    billed_through: datetime | None  # its billing line's mark: an open allocation is billed with its line
    charged: str  # safe HTML, as RevenueLine.amount: what the line was charged
    balance: str
    lasts: str


def open_allocations_view(request: HttpRequest) -> HttpResponse:
    allocations = list(
        Allocation.objects.open().select_related("job__owner", "chip_type", "node").order_by("started_at")[:OPEN_LIMIT]
    )
    now = timezone.now()
    book = PriceBook.load({a.chip_type_id for a in allocations})
    owners = {a.job.owner_id for a in allocations}
    balances = dict(
        Account.objects.filter(owner_id__in=owners, kind=AccountKind.WALLET, currency=settings.CURRENCY).values_list(
            "owner_id", "balance"
        )
    )
    rates = {a.pk: allocation_rate(a, book, now) for a in allocations}
    billing_lines = {
        (line.job_id, line.chip_type_id, line.mode): line
        for line in BillingLine.objects.filter(job_id__in={a.job_id for a in allocations})
    }
    owner_rates: dict[int, int] = {}
    for a in allocations:
        owner_rates[a.job.owner_id] = owner_rates.get(a.job.owner_id, 0) + rates[a.pk]
    lines = []
    for a in allocations:
        balance, owner_rate = balances.get(a.job.owner_id, 0), owner_rates[a.job.owner_id]
        lasts = format_duration(SpendRate(owner_rate, balance).lasts_seconds)
        billing = billing_lines.get((a.job_id, a.chip_type_id, a.mode))
        lines.append(
            OpenAllocationLine(
                a,
                f"{format_price(rates[a.pk])}/h",
                billing.billed_through if billing else None,
                money_html(billing.charged_total if billing else 0),
                money_html(balance),
                lasts,
            )
        )
    context = {"lines": lines, "total_rate": f"{format_price(sum(rates.values()))}/h", "limit": OPEN_LIMIT}
    return _render(request, "admin_open.html", _("Open allocations and their spend rate"), context)


# ---------------------------------------------------------------- payments and refunds


def payments_view(request: HttpRequest) -> HttpResponse:
    context = {
        "payments": [
            (p, money_html(p.amount), money_html(p.refunded_amount))
            for p in Payment.objects.select_related("user").order_by("-created_at")[:RECENT_LIMIT]
        ],
        "refunds": [
            (r, money_html(r.amount))
            for r in Refund.objects.select_related("payment__user", "created_by").order_by("-created_at")[:RECENT_LIMIT]
        ],
        "limit": RECENT_LIMIT,
    }
    return _render(request, "admin_payments.html", _("Recent payments and refunds"), context)


# ---------------------------------------------------------------- wiring


def report_urls(site: admin.AdminSite) -> list:
    return [
        path("billing-reports/revenue/", site.admin_view(revenue_view), name="billing_report_revenue"),
        path("billing-reports/open/", site.admin_view(open_allocations_view), name="billing_report_open"),
        path("billing-reports/payments/", site.admin_view(payments_view), name="billing_report_payments"),
    ]


def install(site: admin.AdminSite = admin.site) -> None:
    """Add the report URLs to the site and a box linking them to its index; a second call is a no-op."""
    if getattr(site, "_billing_reports_installed", False):
        return
    original_get_urls = site.get_urls
    site.get_urls = lambda: report_urls(site) + original_get_urls()
    site.index_template = "portal/statements/admin_index.html"
    site._billing_reports_installed = True


install()
