"""Celery tasks of the compute side: thin wrappers over services, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from workers.services import monitor, planning


@shared_task(ignore_result=True)
def schedule_job(job_id: int) -> None:
    """Plan and place one queued job (the periodic reconcile retries it if no chips are free)."""
    planning.schedule(job_id)


@shared_task(ignore_result=True, soft_time_limit=60)
def reconcile_jobs() -> dict[str, int]:
    return monitor.reconcile()
