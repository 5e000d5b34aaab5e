"""Orders for node agents: queued as rows, re-sent on every poll until acked, woken through Redis.

Commands are written in the caller's transaction and the agents are woken after it commits, so an
agent never sees an order for a placement that was rolled back.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from fleet.choices import CommandStatus
from fleet.models import Allocation, Job
from kernel.protocol import CommandType
from workers.models import AgentCommand
from workers.services import channel


def send_to_nodes(
    job: Job, command: str, payload: dict, now: datetime | None = None, node_ids: list[int] | None = None
) -> list[int]:
    """Queue a command for every node that holds the job's chips now (or for `node_ids`), then wake them."""
    now = now or timezone.now()
    if node_ids is None:
        node_ids = list(Allocation.objects.open().filter(job=job).values_list("node_id", flat=True).distinct())
    AgentCommand.objects.bulk_create(
        [
            AgentCommand(node_id=node_id, job=job, epoch=job.epoch, type=command, payload=payload, created_at=now)
            for node_id in node_ids
        ]
    )
    wake_after_commit(node_ids)
    return node_ids


def queue_for_node(node_id: int, job: Job, command: str, payload: dict, now: datetime) -> AgentCommand:
    """Queue one command for one node (woken after commit)."""
    queued = AgentCommand.objects.create(
        node_id=node_id, job=job, epoch=job.epoch, type=command, payload=payload, created_at=now
    )
    wake_after_commit([node_id])
    return queued


def withdraw_pending(job: Job, why: str, now: datetime, *, up_to_epoch: int | None = None, starts_only=False) -> int:
    """Commands of the job not yet acked are not sent any more (all of them, or up to an epoch, or starts)."""
    pending = AgentCommand.objects.filter(job=job, status=CommandStatus.PENDING)
    if up_to_epoch is not None:
        pending = pending.filter(epoch__lte=up_to_epoch)
    if starts_only:
        pending = pending.filter(type=CommandType.START)
    return pending.update(status=CommandStatus.REFUSED, error=why, acked_at=now)


def wake_after_commit(node_ids: list[int]) -> None:
    transaction.on_commit(lambda: [channel.wake_agent(node_id) for node_id in node_ids])
