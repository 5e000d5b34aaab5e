"""The wallet's history for people: meter charges grouped per job and hour, every other movement alone.

The meter charges every running allocation every 5 s, so an hour of one job is 720 ledger entries.
A person wants one line for it: job, hour, total, chip-seconds and how many ticks, with the single
charges behind it on demand. Top-ups, refunds, grants, adjustments, reversals and reserved-chip
charges stay one row each.

The grouping happens in the database: one UNION ALL of the user's charges aggregated per (job, hour)
and the user's wallet entries that no meter charge explains, ordered and paginated as groups, so a
page costs the same whatever the number of ticks. Hours are whole UTC hours (the ledger pages say
UTC), which no daylight-saving change can split or merge. Money stays in micro-units.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from base.stored_text import render_column
from billing.choices import AccountKind, TransactionKind
from billing.models import Charge
from fleet.models import Job

METER = "meter"
HOUR = timedelta(hours=1)

# Both halves yield: kind, at, amount, job_id, hour, chip_seconds, ticks, memo, entry_id, memo_text.
# A charge group's amount is what left the wallet (negative), as an entry's amount is. The sums are
# cast back to bigint: PostgreSQL sums bigints as numeric, which would reach Python as Decimal.
_ROWS = """
    SELECT %(meter)s AS kind, MAX(c.created_at) AS at, (-SUM(c.amount))::bigint AS amount, c.job_id,
           date_trunc('hour', c.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
           SUM(c.chip_seconds)::bigint AS chip_seconds, COUNT(DISTINCT c.transaction_id) AS ticks,
           '' AS memo, NULL::bigint AS entry_id, '{}'::jsonb AS memo_text
      FROM billing_charge c
     WHERE c.owner_id = %(owner)s
     GROUP BY c.job_id, date_trunc('hour', c.created_at AT TIME ZONE 'UTC')
    UNION ALL
    SELECT t.kind, e.created_at, e.amount, NULL, NULL, 0, 0, t.memo, e.id, t.memo_text
      FROM billing_entry e
      JOIN billing_account a ON a.id = e.account_id
      JOIN billing_transaction t ON t.id = e.transaction_id
     WHERE a.owner_id = %(owner)s AND a.kind = %(wallet)s AND a.currency = %(currency)s
       AND NOT EXISTS (SELECT 1 FROM billing_charge m WHERE m.transaction_id = e.transaction_id)
"""


@dataclass(frozen=True)
class LedgerRow:
    """One line of the history: a (job, hour) group of meter charges, or one wallet entry."""

    kind: str  # METER, or the entry's TransactionKind
    at: datetime  # the group's last charge, or the entry's time
    amount: int  # signed micro-units, as the wallet moved
    job_id: int | None = None
    hour: datetime | None = None  # the group's hour (its start, UTC)
    chip_seconds: int = 0
    ticks: int = 0
    memo: str = ""
    entry_id: int | None = None
    memo_text: dict | None = None  # the memo's msgid and values (base.stored_text)
    job_label: str = ""

    @property
    def is_meter(self) -> bool:
        return self.kind == METER

    @property
    def is_credit(self) -> bool:
        return self.amount > 0

    @property
    def kind_label(self) -> str:
        return "Compute charge" if self.is_meter else TransactionKind(self.kind).label

    @property
    def hour_end(self) -> datetime | None:
        return self.hour + HOUR if self.hour else None

    @property
    def hour_key(self) -> int | None:
        """The hour as a Unix timestamp: how the page asks for the group's single charges."""
        return int(self.hour.timestamp()) if self.hour else None

    @property
    def description(self) -> str:
        """In the active language: a memo stored with its msgid and values is rendered for the reader."""
        if self.is_meter:
            return self.job_label
        if not self.memo:
            return self.kind_label
        # Read by a raw query, the jsonb column comes as its text (Django leaves parsing it to JSONField).
        data = json.loads(self.memo_text) if isinstance(self.memo_text, str) else self.memo_text
        return render_column(self.memo, data)


class LedgerHistory:
    """A user's grouped history as a sliceable, countable sequence, so Django's Paginator pages it in SQL."""

    def __init__(self, user):
        self.params = {
            "meter": METER,
            "owner": user.pk,
            "wallet": AccountKind.WALLET,
            "currency": settings.CURRENCY,
        }

    def count(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM ({_ROWS}) AS rows", self.params)
            return cursor.fetchone()[0]

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, window: slice) -> list[LedgerRow]:
        if not isinstance(window, slice) or window.step not in (None, 1):
            raise TypeError("LedgerHistory is read a page at a time: slice it.")
        offset = window.start or 0
        limit = None if window.stop is None else max(window.stop - offset, 0)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT * FROM ({_ROWS}) AS rows ORDER BY at DESC, entry_id DESC NULLS LAST, job_id DESC"
                " LIMIT %(limit)s OFFSET %(offset)s",
                {**self.params, "limit": limit, "offset": offset},
            )
            rows = [LedgerRow(*values) for values in cursor.fetchall()]
        return _with_job_labels(rows)


def _with_job_labels(rows: list[LedgerRow]) -> list[LedgerRow]:
    """Name each group's job ("Job 12 · llama-tiny"): one query for the page's jobs."""
    job_ids = {row.job_id for row in rows if row.job_id is not None}
    if not job_ids:
        return rows
    labels = {
        pk: _("Job %(id)s · %(name)s") % {"id": pk, "name": name or model_name}
        for pk, name, model_name in Job.objects.filter(pk__in=job_ids).values_list("pk", "name", "model_name")
    }
    return [replace(row, job_label=labels.get(row.job_id, "")) if row.is_meter else row for row in rows]


class BadGroup(ValueError):
    """A request for a group's charges that names no whole hour; the message is safe to show."""


def hour_from_key(key: int) -> datetime:
    """The UTC hour a page's `hour_key` names; refuses a time that is not the start of an hour."""
    if key % 3600:
        raise BadGroup(_("%(key)s is not the start of an hour (a Unix time divisible by 3600).") % {"key": key})
    try:
        return datetime.fromtimestamp(key, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise BadGroup(_("%(key)s is not a time this ledger can show.") % {"key": key}) from None


def group_charges(user, job_id: int, hour: datetime) -> QuerySet[Charge]:
    """The single meter charges behind one (job, hour) row, oldest first, each with its chip-seconds."""
    return (
        Charge.objects.filter(owner=user, job_id=job_id, created_at__gte=hour, created_at__lt=hour + HOUR)
        .select_related("chip_type")
        .order_by("created_at", "id")
    )
