"""Scheduling: plan a queued job on the chips free now and place it, or let it wait with backoff.

Beside planning, the Celery tasks that run this sit here too (registered by
name in workers.tasks), so no service imports a tasks module. Both run on the planning queue
(portal.task_routes): users can fill it with jobs, and the meter and the reconciler never wait
behind it.
"""

from __future__ import annotations

from celery import shared_task
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from kernel import planner
from workers.services import lifecycle, spot
from workers.services.island_joins import grow_runs
from workers.services.launch import planning_text
from workers.services.placement import CapacityChanged, allocate
from workers.services.planning import quote
from workers.services.queue import due_jobs, wake_on_fleet_change

WAITING_FOR_CHIPS = gettext_noop("Waiting for chips: %(reason)s")


def schedule(job_id: int) -> bool:
    """Plan and place one queued job; True when it was placed."""
    job = lifecycle.claim_for_planning(job_id)
    if job is None:
        return False
    spec = spot.replan_spec(job)
    try:
        plan = quote(spec, spot.MarketView.for_job(job) if job.spot else None)
    except planner.NoCapacity as error:
        reason = spot.claim_held_chips(job, lambda market: quote(spec, market)) or planning_text(error)
        lifecycle.wait_for_chips(job.pk, StoredText(WAITING_FOR_CHIPS, reason=reason))
        return False
    except planner.PlanningError as error:
        with transaction.atomic():
            lifecycle.fail(job, StoredText(gettext_noop("Cannot be planned: %(reason)s"), reason=planning_text(error)))
        return False
    try:
        return bool(allocate(job, plan))
    except CapacityChanged as error:
        lifecycle.wait_for_chips(job.pk, StoredText(WAITING_FOR_CHIPS, reason=str(error)))
        return False


def schedule_waiting_jobs(now=None) -> int:
    """The planning pass: plan every queued job whose backoff is over; how many were placed."""
    now = now or timezone.now()
    wake_on_fleet_change(now)
    placed = sum(bool(schedule(job_id)) for job_id in due_jobs(now).values_list("pk", flat=True))
    grow_runs(now)  # runs of islands that lost some: free chips join them as new islands
    return placed


@shared_task(name="workers.tasks.schedule_job", ignore_result=True)
def schedule_job(job_id: int) -> None:
    """Plan and place one queued job (the planning pass retries it, with backoff, if no chips are free)."""
    schedule(job_id)


@shared_task(name="workers.tasks.schedule_waiting_jobs", ignore_result=True, soft_time_limit=60)
def schedule_waiting_jobs_task() -> int:
    """The planning pass over queued jobs whose backoff is over."""
    return schedule_waiting_jobs()


def plan_soon(job_id: int) -> None:
    """Ask for the job to be planned as soon as the caller's transaction commits."""
    schedule_job.delay_on_commit(job_id)
