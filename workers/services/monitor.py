"""The reconciler: a short, idempotent pass over jobs and nodes that Celery beat runs every few seconds."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing.services.holds import stop_low_balance
from workers.choices import AgentStatus, JobStatus
from workers.models import Allocation, Job, MigrationReason, Node, RankExit
from workers.services.fleet import silent_nodes
from workers.services.jobs import finish_job
from workers.services.migration import fence_epoch, overdue_notices, reclaim_job

logger = logging.getLogger(__name__)


def reconcile(now=None) -> dict[str, int]:
    """One pass; each step is safe to run twice or concurrently (rows are locked and re-read)."""
    now = now or timezone.now()
    return {
        "lost_nodes": migrate_jobs_off_silent_nodes(now),
        "notices_over": overdue_notices(now),
        "crashed": fail_jobs_with_crashed_ranks(now),
        "stuck": fail_stuck_provisioning(now),
        "stopped": finish_overdue_stops(now),
        "credit_stops": stop_low_balance(now),
        "requeued": requeue_abandoned_planning(now),
    }  # planning waiting jobs is a pass of its own, on the planning queue (planning.schedule_waiting_jobs)


def migrate_jobs_off_silent_nodes(now) -> int:
    """A node silent past the heartbeat deadline is lost; its jobs resume elsewhere from their last checkpoint."""
    lost = 0
    for node in silent_nodes(now):
        with transaction.atomic():
            node = Node.objects.select_for_update().get(pk=node.pk)
            if node.agent_status not in (AgentStatus.ONLINE, AgentStatus.DRAINING):
                continue
            if node.last_heartbeat_at and node.last_heartbeat_at >= now - timedelta(
                seconds=settings.AGENT_HEARTBEAT_DEADLINE_S
            ):
                continue
            silence = f"{(now - node.last_heartbeat_at).total_seconds():.0f}s" if node.last_heartbeat_at else "ever"
            declare_lost(node, f"node {node.hostname} went silent (no heartbeat for {silence})", now)
            lost += 1
        logger.warning("node %s declared lost", node.hostname)
    return lost


def declare_lost(node: Node, detail: str, now) -> None:
    """The node is gone: fence every job placed on it at once and move it (or fail it when it can't move).

    Call inside a transaction with the node's row locked. Its agent, should it come back, finds a
    kill command for each job's ranks queued before anything else (see fleet.record_heartbeat).
    """
    last_seen = node.last_heartbeat_at
    node.agent_status = AgentStatus.LOST
    node.save(update_fields=["agent_status"])
    job_ids = list(Allocation.objects.open().filter(node=node).values_list("job_id", flat=True).distinct())
    for job_id in job_ids:
        moved = reclaim_job(
            job_id, MigrationReason.LOST_NODE, detail, nodes=[node], notice_seconds=0, now=now, last_seen=last_seen
        )
        if moved is None:  # not running (starting or stopping): it can't go on without the node
            job = Job.objects.select_for_update().get(pk=job_id)
            if not job.is_finished:
                fence_epoch(job, now)
            finish_job(job, JobStatus.FAILED, f"{detail[0].upper()}{detail[1:]}.", now=now)


def reset_node(node: Node, by: str, now=None) -> None:
    """Operator: revoke the host's node token and treat it as lost (its jobs move at once, fenced);
    the next enrollment of the hostname with a usable enrollment token takes it over."""
    now = now or timezone.now()
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        node.token_hash = None
        node.save(update_fields=["token_hash"])
        if node.agent_status in (AgentStatus.ONLINE, AgentStatus.DRAINING):
            declare_lost(node, f"node {node.hostname} was reset by {by}", now)


def fail_jobs_with_crashed_ranks(now) -> int:
    """A rank exited with an error and every node of the job has polled since: a real crash, so the job fails."""
    from workers.services.reports import crash_reason

    count = 0
    crashed = RankExit.objects.filter(
        job__status__in=[JobStatus.PROVISIONING, JobStatus.RUNNING], epoch=F("job__epoch")
    ).exclude(code=0)
    for job_id in set(crashed.values_list("job_id", flat=True)):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            first = (
                RankExit.objects.filter(job=job, epoch=job.epoch).exclude(code=0).order_by("created_at", "pk").first()
            )
            if job.status not in (JobStatus.PROVISIONING, JobStatus.RUNNING) or first is None:
                continue
            nodes = Node.objects.filter(allocations__job=job, allocations__ended_at__isnull=True).distinct()
            if all(node.last_heartbeat_at and node.last_heartbeat_at > first.created_at for node in nodes):
                finish_job(job, JobStatus.FAILED, crash_reason(first), now=now)
                count += 1
    return count


def fail_stuck_provisioning(now) -> int:
    deadline = now - timedelta(seconds=settings.JOB_PROVISIONING_TIMEOUT_S)
    count = 0
    for job in Job.objects.filter(status=JobStatus.PROVISIONING, updated_at__lt=deadline):
        with transaction.atomic():
            finish_job(
                job,
                JobStatus.FAILED,
                f"The ranks did not start within {settings.JOB_PROVISIONING_TIMEOUT_S}s.",
                now=now,
            )
            count += 1
    return count


def finish_overdue_stops(now) -> int:
    deadline = now - timedelta(seconds=settings.JOB_STOP_GRACE_S + 10)
    count = 0
    for job in Job.objects.filter(status=JobStatus.STOPPING, cancel_requested_at__lt=deadline):
        with transaction.atomic():
            finish_job(job, JobStatus.CANCELLED, "Cancelled (the ranks were stopped)", now=now)
            count += 1
    return count


def requeue_abandoned_planning(now) -> int:
    """A worker that died while planning leaves its job in PLANNING; put it back in the queue."""
    deadline = now - timedelta(seconds=60)
    return Job.objects.filter(status=JobStatus.PLANNING, updated_at__lt=deadline).update(
        status=JobStatus.QUEUED, updated_at=now
    )
