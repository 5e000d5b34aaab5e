"""CSV exports of the wallet ledger and of charged usage: one header row, money as decimal strings."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from datetime import date

from django.conf import settings
from django.db.models import QuerySet
from django.utils import translation

from billing.models import Charge, Entry
from kernel.money import format_amount

LEDGER_HEADER = ["date_utc", "transaction", "kind", "description", "amount", "balance_after", "currency"]
USAGE_HEADER = [
    "charge",
    "job",
    "job_name",
    "chip_type",
    "mode",
    "chips",
    "started_at_utc",
    "ended_at_utc",
    "seconds",
    "chip_seconds",
    "amount",
    "currency",
]


# A cell a spreadsheet would run as a formula starts with one of these (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"^[+-]?[0-9]+(\.[0-9]+)?$")


def safe_cell(value: object) -> object:
    """A text cell that would start a formula, quoted with a leading apostrophe; numbers ("-1.50") stay as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not PLAIN_NUMBER.match(value):
        return "'" + value
    return value


class _Echo:
    """A file-like object that hands back what is written, so rows can be streamed."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: list[str], rows: Iterable[list]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        # Names and memos are the user's own text: "=HYPERLINK(...)" must reach a spreadsheet as text.
        yield writer.writerow([safe_cell(cell) for cell in row])


def _iso(value) -> str:
    return value.isoformat(timespec="seconds")


def english_kind(txn) -> str:
    """A transaction's kind as the CSV has always said it, in English whatever the reader's language."""
    with translation.override("en"):
        return str(txn.get_kind_display())


def ledger_rows(entries: QuerySet[Entry], opening_balance: int) -> Iterator[list]:
    """Oldest first, with the wallet balance after each entry."""
    balance = opening_balance
    for entry in entries.order_by("created_at", "id").iterator(chunk_size=2000):
        balance += entry.amount
        txn = entry.transaction
        yield [
            _iso(entry.created_at),
            txn.pk,
            txn.kind,
            txn.memo or english_kind(txn),
            format_amount(entry.amount),
            format_amount(balance),
            settings.CURRENCY,
        ]


def usage_rows(charges: QuerySet[Charge]) -> Iterator[list]:
    charges = charges.select_related("job", "chip_type").order_by("ended_at", "id")
    for charge in charges.iterator(chunk_size=2000):
        yield [
            charge.pk,
            charge.job_id,
            charge.job.name or charge.job.model_name,
            charge.chip_type.slug,
            charge.mode,
            charge.chips,
            _iso(charge.started_at),
            _iso(charge.ended_at),
            charge.seconds,
            charge.chip_seconds,
            format_amount(charge.amount),
            settings.CURRENCY,
        ]


def export_filename(what: str, since: date | None, until: date | None, today: date) -> str:
    """ "starverse-usage-2026-03-01-to-2026-03-31.csv"; an open start reads "start"."""
    return f"starverse-{what}-{since.isoformat() if since else 'start'}-to-{(until or today).isoformat()}.csv"
