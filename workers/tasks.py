"""Celery tasks of the compute side, registered by name for the beat and the workers.

Tasks sit beside the services they wrap (workers.services.scheduling holds the planning tasks),
so no service imports this module.
"""

from __future__ import annotations

from celery import shared_task

from base.outage import DATABASE_UNAVAILABLE, note_database_error
from workers.services import monitor
from workers.services.checkpoints import prune_checkpoints_task
from workers.services.deployments import scale_deployments
from workers.services.retention import prune_job_telemetry_task
from workers.services.scheduling import schedule_job, schedule_waiting_jobs_task
from workers.services.serving_load import inflight

__all__ = [
    "prune_checkpoints_task",
    "prune_job_telemetry_task",
    "reconcile_jobs",
    "scale_deployments_task",
    "schedule_job",
    "schedule_waiting_jobs_task",
]


@shared_task(ignore_result=True, soft_time_limit=60)
def reconcile_jobs() -> dict[str, int]:
    """Lost nodes, notices, crashes, stuck and credit stops: never waits behind planning (default queue)."""
    try:
        return monitor.reconcile()
    except DATABASE_UNAVAILABLE as error:
        note_database_error(error)  # the pass after the outage measures the nodes' silence from now on
        raise


@shared_task(ignore_result=True, soft_time_limit=60)
def scale_deployments_task() -> dict[str, int]:
    """Deployments to their wanted replicas: a minimum kept, a cold one started, an idle one scaled to zero."""
    return scale_deployments(inflight=inflight())
