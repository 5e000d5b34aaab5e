"""Holds, caps and credit stops: a job never runs on money the user doesn't have.

- At launch (and again at placement) the balance must cover `hold_minutes` of the plan.
- The monitor's pass stops, with a checkpoint, every running job of a user whose balance
  (less what has run but is not billed yet) would run out within `stop_margin_minutes` at the
  current spend rate (the sum of the user's open allocations' prices), and a job whose charges
  would reach its total budget within the same margin.
- A stopped job is STOPPING with the reason until its ranks exit; it then ends as
  `stopped_no_credit` (workers.services.reports), or is ended so by the monitor after the stop
  grace if the ranks never report.
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.utils import timezone

from billing.models import OperatorSettings
from billing.money import format_amount, round_micros
from billing.services.ledger import balance_of
from billing.services.meter import PriceBook
from workers.choices import JobEventKind, JobStatus
from workers.models import Allocation, Job, JobEvent
from workers.protocol import CommandType
from workers.services.events import record_event

logger = logging.getLogger(__name__)

NO_CREDIT = "no_credit"
STOPPABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.MIGRATING}
CREDIT_LOCK = zlib.crc32(b"starverse-credit") & 0x7FFFFFFF  # advisory lock keys are 32-bit signed


class HoldRefused(Exception):
    """The balance does not cover the hold; the message names the balance and what is needed."""


def money(micros: int) -> str:
    return f"{settings.CURRENCY_SYMBOL}{format_amount(micros)}"


def hold_needed(plan_price_per_hour: int, minutes: int | None = None) -> int:
    minutes = OperatorSettings.load().hold_minutes if minutes is None else minutes
    return round_micros(Decimal(plan_price_per_hour) * minutes / 60)


def lock_credit(owner) -> None:
    """Serialise the owner's credit decisions (bids, launches, placements) until the transaction ends.

    The race it closes: two requests of one owner each read the balance and what is already held,
    each sees room for one more, and both commit, holding more than the balance covers (four
    concurrent bids once held ¥12.00 against ¥9.998). With this transaction-scoped advisory lock the
    second request waits until the first has committed, and then reads the first one's bid or job
    (each statement at READ COMMITTED sees what committed before it). Take it before reading the
    balance, after any row locks the caller takes (the one lock order everywhere: rows, then credit).
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
        on_top = f", on top of {money(committed)} held by your queued jobs and bids" if committed else ""
        raise HoldRefused(
            f"Your balance is {money(balance)}; launching this plan ({money(plan_price_per_hour)}/h) needs "
            f"at least {money(needed)}, enough for {minutes} minutes{on_top}. Top up or choose a cheaper plan."
        )


# Stops ----------------------------------------------------------------------------------------


def stop_for_credit(job_id: int, reason: str, *, data: dict | None = None, now=None) -> bool:
    """Checkpoint and stop a job that has run out of money; True when this call stopped it."""
    from workers.services.placement import send_to_nodes

    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in STOPPABLE or credit_stop_requested(job):
            if data and job.is_finished:  # a final charge the wallet could not cover
                record_event(job, JobEventKind.NOTICE, reason, data={**data, "stop": NO_CREDIT}, now=now)
            return False
        job.status, job.status_reason = JobStatus.STOPPING, reason
        job.save(update_fields=["status", "status_reason", "updated_at"])
        send_to_nodes(job, CommandType.STOP, {"reason": NO_CREDIT, "checkpoint": True}, now=now)
        record_event(job, JobEventKind.NOTICE, reason, data={**(data or {}), "stop": NO_CREDIT}, now=now)
        transaction.on_commit(lambda: _tell_owner(job, reason))
    logger.info("job %s stopped for credit: %s", job_id, reason)
    return True


def credit_stop_requested(job: Job) -> bool:
    """Whether the current placement was stopped for credit (so its end is `stopped_no_credit`)."""
    return JobEvent.objects.filter(job=job, epoch=job.epoch, kind=JobEventKind.NOTICE, data__stop=NO_CREDIT).exists()


def _tell_owner(job: Job, reason: str) -> None:
    if not job.owner.email:
        return
    send_mail(
        f"Starverse: job {job.pk} was stopped ({job.name or job.model_name})",
        f"{reason}\n\nA checkpoint was taken before stopping, so no finished work is lost. "
        "Top up your balance and submit the job again to continue.",
        None,
        [job.owner.email],
        fail_silently=True,
    )


def stop_low_balance(now=None) -> int:
    """The monitor's credit step: stop jobs whose owner's money, or whose total budget, runs out soon."""
    now = now or timezone.now()
    margin = timedelta(minutes=OperatorSettings.load().stop_margin_minutes)
    spend = open_spend(now)
    stopped = 0
    for owner_id, jobs in _by_owner(spend).items():
        rate = sum(s.rate for s in jobs.values())
        left = balance_of_id(owner_id) - sum(s.unbilled for s in jobs.values())
        if left < _cost(rate, margin):
            reason = (
                f"Stopped before your balance ran out: {money(max(left, 0))} left at {money(rate)}/h "
                f"would last less than the {margin.seconds // 60}-minute stop margin."
            )
            stopped += sum(
                stop_for_credit(job_id, reason, data={"balance": left, "rate": rate}, now=now) for job_id in jobs
            )
    for job in Job.objects.filter(pk__in=[s.job_id for s in spend], total_budget__isnull=False):
        s = next(s for s in spend if s.job_id == job.pk)
        if s.charged + s.unbilled + _cost(s.rate, margin) >= job.total_budget:
            reason = (
                f"Stopped at its total budget of {money(job.total_budget)} ({money(s.charged + s.unbilled)} spent)."
            )
            stopped += stop_for_credit(job.pk, reason, data={"total_budget": job.total_budget}, now=now)
    return stopped + finish_overdue_credit_stops(now)


class JobSpend:
    """A running job's spend: rate now, charged so far, and run-but-not-yet-billed."""

    def __init__(self, job_id: int, owner_id: int):
        self.job_id, self.owner_id = job_id, owner_id
        self.rate = self.charged = self.unbilled = 0


def open_spend(now: datetime) -> list[JobSpend]:
    open_allocations = Allocation.objects.open().filter(job__status__in=STOPPABLE).select_related("job")
    rows = list(open_allocations)
    book = PriceBook.load({a.chip_type_id for a in rows})
    spend: dict[int, JobSpend] = {}
    for allocation in rows:
        s = spend.setdefault(allocation.job_id, JobSpend(allocation.job_id, allocation.job.owner_id))
        per_hour = allocation.chips * (book.price_per_hour(allocation.chip_type_id, allocation.mode, now) or 0)
        s.rate += per_hour
        s.unbilled += _cost(per_hour, max(now - allocation.billed_through, timedelta(0)))
    charged = Allocation.objects.filter(job_id__in=spend).values_list("job_id", "charged_total")
    for job_id, total in charged:
        spend[job_id].charged += total
    return list(spend.values())


def _by_owner(spend: list[JobSpend]) -> dict[int, dict[int, JobSpend]]:
    owners: dict[int, dict[int, JobSpend]] = defaultdict(dict)
    for s in spend:
        owners[s.owner_id][s.job_id] = s
    return owners


def balance_of_id(owner_id: int) -> int:
    from django.contrib.auth import get_user_model

    return balance_of(get_user_model()(pk=owner_id))


def spend_over(per_hour: int, span: timedelta) -> int:
    """What a rate of `per_hour` costs over `span`, rounded once (the stop margin's arithmetic)."""
    return _cost(per_hour, span)


def _cost(per_hour: int, span: timedelta) -> int:
    return round_micros(Decimal(per_hour) * Decimal(span // timedelta(microseconds=1)) / 3_600_000_000)


def finish_overdue_credit_stops(now) -> int:
    """A credit-stopped job whose ranks never reported an exit ends after the stop grace."""
    from workers.services.jobs import finish_job

    deadline = now - timedelta(seconds=settings.JOB_STOP_GRACE_S + 10)
    overdue = JobEvent.objects.filter(
        job__status=JobStatus.STOPPING,
        job__cancel_requested_at__isnull=True,
        kind=JobEventKind.NOTICE,
        data__stop=NO_CREDIT,
        created_at__lt=deadline,
    ).values_list("job_id", flat=True)
    count = 0
    for job_id in set(overdue):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.status == JobStatus.STOPPING and credit_stop_requested(job):
                finish_job(job, JobStatus.STOPPED_NO_CREDIT, job.status_reason, now=now)
                count += 1
    return count
