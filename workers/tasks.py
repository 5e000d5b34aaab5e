"""Celery tasks of the compute side: thin wrappers over services, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from workers.services import monitor, planning


@shared_task(ignore_result=True)
def schedule_job(job_id: int) -> None:
    """Plan and place one queued job (the planning pass retries it, with backoff, if no chips are free).

    Routed to the planning queue (portal.task_routes), like `schedule_waiting_jobs`.
    """
    planning.schedule(job_id)


@shared_task(ignore_result=True, soft_time_limit=60)
def schedule_waiting_jobs() -> int:
    """The planning pass over queued jobs whose backoff is over (the planning queue)."""
    return planning.schedule_waiting_jobs()


@shared_task(ignore_result=True, soft_time_limit=60)
def reconcile_jobs() -> dict[str, int]:
    """Lost nodes, notices, crashes, stuck and credit stops: never waits behind planning (default queue)."""
    return monitor.reconcile()
