"""Holds, caps and credit stops: a job never runs on money the user doesn't have.

Billing decides here; it does not act on jobs. Whoever acts (workers.services.lifecycle, called by
the reconciler and by workers.receivers) checkpoints and stops the jobs these rules name.

- At launch (and again at placement) the balance must cover `hold_minutes` of the plan, on top of
  what the owner's queued jobs and bids already hold (`check_hold`, under `lock_credit`).
- `credit_stops` names every running job of a user whose balance (less what has run but is not
  billed yet) would run out within `stop_margin_minutes` at the current spend rate (the sum of
  the user's open allocations' prices), and every job whose charges would reach its total budget
  within the same margin. It reads only the database, so a reconciler that calls it on every
  pass re-derives a stop that a crashed process never carried out.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from base.stored_text import StoredText
from billing.models import BillingLine, OperatorSettings
from billing.services.ledger import balance_of
from billing.services.pricing import PriceBook
from fleet.choices import JobStatus
from fleet.models import Allocation, Job
from kernel.money import cost_over, format_money, format_money_needed

STOPPABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.MIGRATING}
CREDIT_LOCK = zlib.crc32(b"starverse-credit") & 0x7FFFFFFF  # advisory lock keys are 32-bit signed


class HoldRefused(Exception):
    """The balance does not cover the hold; the message names the balance and what is needed (in the active
    language; `text`: its msgid and values, to store)."""

    def __init__(self, message: str, text: StoredText | None = None):
        super().__init__(message)
        self.text = text or StoredText.of(message)


HOLD_WITH_COMMITTED = gettext_noop(
    "Your balance is %(balance)s; launching this plan (%(price)s/h) needs at least %(needed)s, enough "
    "for %(minutes)s minutes, on top of %(committed)s held by your queued jobs and bids. Top up or "
    "choose a cheaper plan."
)
HOLD = gettext_noop(
    "Your balance is %(balance)s; launching this plan (%(price)s/h) needs at least %(needed)s, enough "
    "for %(minutes)s minutes. Top up or choose a cheaper plan."
)


def hold_needed(plan_price_per_hour: int, minutes: int | None = None) -> int:
    minutes = OperatorSettings.load().hold_minutes if minutes is None else minutes
    return cost_over(plan_price_per_hour, timedelta(minutes=minutes))


def lock_credit(owner) -> None:
    """Serialise the owner's credit decisions (bids, launches, placements) until the transaction ends.

    The race it closes: two requests of one owner each read the balance and what is already held,
    each sees room for one more, and both commit, holding more than the balance covers (four
    concurrent bids once held ¥12.00 against ¥9.998). With this transaction-scoped advisory lock the
    second request waits until the first has committed, and then reads the first one's bid or job
    (each statement at READ COMMITTED sees what committed before it). Take it before reading the
    balance, after the job, bid and node rows the caller locks, before reservations and ledger
    accounts (the one lock order: docs/ARCHITECTURE.md, "Locks"; market/services/locks.py).
    """
    if not connection.in_atomic_block:
        raise RuntimeError("lock_credit needs a transaction: the lock is released when it ends.")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CREDIT_LOCK, owner.pk])


def check_hold(user, plan_price_per_hour: int, committed: int = 0) -> None:
    """Raise HoldRefused unless the balance covers `hold_minutes` of the plan on top of `committed`.

    `committed` is what the user's queued jobs and active bids already hold; call under `lock_credit`.
    """
    minutes = OperatorSettings.load().hold_minutes
    needed = hold_needed(plan_price_per_hour, minutes)
    balance = balance_of(user)
    if balance < needed + committed:
        values = {
            "balance": format_money(balance),
            "price": format_money(plan_price_per_hour),
            "needed": format_money_needed(needed),
            "minutes": minutes,
            "committed": format_money(committed),
        }
        message = HOLD_WITH_COMMITTED if committed else HOLD
        raise HoldRefused(gettext(message) % values, StoredText(message, values))


# Stops ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreditStop:
    """A job that must be checkpointed and stopped now, and why (the reason is shown to its owner)."""

    job_id: int
    reason: str | StoredText
    data: dict


def credit_stops(now=None) -> list[CreditStop]:
    """Jobs whose owner's money, or whose total budget, runs out within the stop margin."""
    now = now or timezone.now()
    margin = timedelta(minutes=OperatorSettings.load().stop_margin_minutes)
    spend = open_spend(now)
    stops = []
    for owner_id, jobs in _by_owner(spend).items():
        rate = sum(s.rate for s in jobs.values())
        left = balance_of_id(owner_id) - sum(s.unbilled for s in jobs.values())
        if left < cost_over(rate, margin):
            reason = StoredText(
                gettext_noop(
                    "Stopped before your balance ran out: %(left)s left at %(rate)s/h would last less than the "
                    "%(minutes)s-minute stop margin."
                ),
                left=format_money(max(left, 0)),
                rate=format_money(rate),
                minutes=margin.seconds // 60,
            )
            stops += [CreditStop(job_id, reason, {"balance": left, "rate": rate}) for job_id in jobs]
    budgets = dict(
        Job.objects.filter(pk__in=[s.job_id for s in spend], total_budget__isnull=False).values_list(
            "pk", "total_budget"
        )
    )
    for s in spend:
        budget = budgets.get(s.job_id)
        if budget is not None and s.charged + s.unbilled + cost_over(s.rate, margin) >= budget:
            reason = StoredText(
                gettext_noop("Stopped at its total budget of %(budget)s (%(spent)s spent)."),
                budget=format_money(budget),
                spent=format_money(s.charged + s.unbilled),
            )
            stops.append(CreditStop(s.job_id, reason, {"total_budget": budget}))
    return stops


class JobSpend:
    """A running job's spend: rate now, charged so far, and run-but-not-yet-billed."""

    def __init__(self, job_id: int, owner_id: int):
        self.job_id, self.owner_id = job_id, owner_id
        self.rate = self.charged = self.unbilled = 0


def open_spend(now: datetime) -> list[JobSpend]:
    open_allocations = Allocation.objects.open().filter(job__status__in=STOPPABLE).select_related("job")
    rows = list(open_allocations)
    book = PriceBook.load({a.chip_type_id for a in rows})
    lines = {
        (line.job_id, line.chip_type_id, line.mode): line
        for line in BillingLine.objects.filter(job_id__in={a.job_id for a in rows})
    }
    spend: dict[int, JobSpend] = {}
    for allocation in rows:
        s = spend.setdefault(allocation.job_id, JobSpend(allocation.job_id, allocation.job.owner_id))
        per_hour = allocation.chips * (book.price_per_hour(allocation.chip_type_id, allocation.mode, now) or 0)
        s.rate += per_hour
        # An open allocation is billed with its line: up to the line's mark (or its own start, if later).
        line = lines.get((allocation.job_id, allocation.chip_type_id, allocation.mode))
        billed = max(line.billed_through, allocation.started_at) if line else allocation.started_at
        s.unbilled += cost_over(per_hour, max(now - billed, timedelta(0)))
    for line in lines.values():
        spend[line.job_id].charged += line.charged_total
    return list(spend.values())


def _by_owner(spend: list[JobSpend]) -> dict[int, dict[int, JobSpend]]:
    owners: dict[int, dict[int, JobSpend]] = defaultdict(dict)
    for s in spend:
        owners[s.owner_id][s.job_id] = s
    return owners


def balance_of_id(owner_id: int) -> int:
    from django.contrib.auth import get_user_model

    return balance_of(get_user_model()(pk=owner_id))
