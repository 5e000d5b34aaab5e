"""Billing statements: usage per job, chip type and day, CSV exports, and the monthly statement.

Amounts reach the templates as micro-units; the `money` filters show them to the cent with the exact
amount on hover. The CSV exports keep every micro-unit (billing.csv_export).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from base.formatting import zone_label
from billing import csv_export
from billing.models import Entry
from billing.services.statements import (
    ALL_TIME,
    Period,
    StatementError,
    UsageGroup,
    UsageRow,
    balance_before,
    charges_for,
    entries_in,
    monthly_statement,
    parse_period,
    statement_months,
    total_of,
    usage_rows,
)


@dataclass(frozen=True)
class UsageLine:
    """One usage row as the pages show it."""

    label: str
    chip_seconds: int
    chip_hours: str
    amount: int


def usage_lines(rows: list[UsageRow]) -> list[UsageLine]:
    return [UsageLine(row.label, row.chip_seconds, f"{row.chip_hours}", row.amount) for row in rows]


@dataclass(frozen=True)
class EntryLine:
    """One payment or refund of the month as the statement lists it."""

    created_at: datetime
    description: str
    amount: int


def entry_line(entry: Entry) -> EntryLine:
    txn = entry.transaction
    return EntryLine(entry.created_at, txn.memo or txn.get_kind_display(), entry.amount)


def default_period() -> Period:
    """This month so far, when the user has not picked dates."""
    today = timezone.localdate()
    return Period(today.replace(day=1), today)


def requested_period(request: HttpRequest, default: Period = ALL_TIME) -> Period:
    since, until = request.GET.get("since"), request.GET.get("until")
    if not since and not until:
        return default
    return parse_period(since, until)


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    try:
        period = requested_period(request, default_period())
    except StatementError as error:
        context = {"error": str(error), "since": request.GET.get("since", ""), "until": request.GET.get("until", "")}
        return render(request, "portal/statements/usage.html", context, status=400)
    charges = charges_for(request.user, period)
    by_job = usage_rows(charges, UsageGroup.JOB)
    by_day = usage_rows(charges, UsageGroup.DAY)
    tables = [
        (_("By job"), _("Job"), "usage-by-job", usage_lines(by_job)),
        (_("By chip type"), _("Chip type"), "usage-by-chip", usage_lines(usage_rows(charges, UsageGroup.CHIP))),
        (_("By day (a charge counts on the day it ended)"), _("Day"), "usage-by-day", usage_lines(by_day)),
    ]
    context = {
        "period": period,
        "since": period.since.isoformat() if period.since else "",
        "until": period.until.isoformat() if period.until else "",
        "tables": tables,
        "total": total_of(by_job),
        "zone": zone_label(timezone.localtime()),
    }
    return render(request, "portal/statements/usage.html", context)


def _csv_response(request: HttpRequest, what: str, header: list[str], rows_for) -> HttpResponse:
    try:
        period = requested_period(request)
    except StatementError as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(
        csv_export.csv_lines(header, rows_for(period)), content_type="text/csv; charset=utf-8"
    )
    filename = csv_export.export_filename(what, period.since, period.until, timezone.localdate())
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
def ledger_csv(request: HttpRequest) -> HttpResponse:
    def rows(period: Period):
        opening = balance_before(request.user, period.start) if period.start else 0
        return csv_export.ledger_rows(entries_in(request.user, period), opening)

    return _csv_response(request, "ledger", csv_export.LEDGER_HEADER, rows)


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    def rows(period: Period):
        return csv_export.usage_rows(charges_for(request.user, period))

    return _csv_response(request, "usage", csv_export.USAGE_HEADER, rows)


@login_required
def statements(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/statements/index.html", {"months": statement_months(request.user)})


@login_required
def statement(request: HttpRequest, month: str) -> HttpResponse:
    try:
        report = monthly_statement(request.user, month)
    except StatementError as error:
        return render(request, "portal/statements/statement_error.html", {"error": str(error)}, status=400)
    context = {
        "month": month,
        "report": report,
        "opening": report.opening,
        "closing": report.closing,
        "net": report.net,
        "movements": [(m.label, m.amount, m.amount > 0) for m in report.movements],
        "payments": [entry_line(entry) for entry in report.payments],
        "refunds": [entry_line(entry) for entry in report.refunds],
        "usage_by_job": usage_lines(report.usage_by_job),
        "usage_by_chip": usage_lines(report.usage_by_chip),
        "usage_total": report.usage_total,
        "generated_at": timezone.now(),
        "zone": zone_label(timezone.localtime(report.period.start)),
    }
    return render(request, "portal/statements/statement.html", context)
