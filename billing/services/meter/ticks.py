"""The meter's ticks: which lines are due, batches of them, each billed in one database transaction."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.services.meter.batch import OF_LINE, UNSETTLED, lock_lines, read_allocations
from billing.services.meter.columns import int_array
from billing.services.meter.cost import SECOND, advance
from billing.services.meter.post import MeterResult, Shortfall, post_batch
from billing.services.pricing import PriceBook
from billing.signals import credit_shortfall
from kernel.money import format_money

logger = logging.getLogger(__name__)

BATCH = 2500  # allocations per database transaction: a batch holds its lines and wallets locked ~0.1 s


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
        lines = lock_lines(ids, skip_locked)
        if not len(lines):
            return MeterResult()
        allocations = read_allocations(lines)
        book = book or PriceBook.load(set(lines.chip_type.tolist()))
        advance(lines, allocations, book, now)
        result = post_batch(lines, allocations, now)
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


def _announce_shortfalls(shortfalls: list[Shortfall], now: datetime) -> None:
    """After commit: each job whose charge its wallet could not cover must stop (billing.signals)."""
    for job_id in sorted({bill.job_id for bill in shortfalls}):
        unpaid = sum(bill.shortfall for bill in shortfalls if bill.job_id == job_id)
        logger.warning("meter: job %s is short of %s", job_id, format_money(unpaid))
        credit_shortfall.send(
            sender=Shortfall,
            job_id=job_id,
            reason=StoredText(
                gettext_noop("Out of credit: %(unpaid)s of usage could not be charged."), unpaid=format_money(unpaid)
            ),
            data={"shortfall": unpaid},
            now=now,
        )
