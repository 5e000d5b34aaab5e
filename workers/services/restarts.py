"""A node agent that restarted has lost its ranks: their jobs move on as from a lost node.

Why: an agent killed and restarted within the heartbeat deadline is never declared lost, yet the
ranks it ran are gone (they lived on its pipes), and the job's other ranks crash when their peer
vanishes. Left alone, those crashes fail the job. The restarted agent's first poll lists the ranks
it knows: none of the job's current placement, although it acked starting them. That poll is the
moment to fence the placement and move the job, before the reconciler takes its peers' crashes
(now of a fenced epoch, so refused as stale) for a failed run.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from fleet.choices import CommandStatus, JobStatus, MigrationReason
from fleet.models import Allocation, Node
from kernel.protocol import CommandType
from workers.models import AgentCommand, RankExit
from workers.services import lifecycle

logger = logging.getLogger(__name__)


def move_jobs_of_vanished_ranks(node: Node, reported: list[dict], now: datetime | None = None) -> list[int]:
    """Jobs running here whose ranks the agent no longer reports: reclaimed as lost on this node.

    `reported`: the rank states of this poll (job, epoch, rank, state). Call before the poll is
    recorded as a heartbeat, so that `node.last_heartbeat_at` is the old agent's last poll.
    """
    now = now or timezone.now()
    known = {(rank["job_id"], rank["epoch"]) for rank in reported}
    moved = []
    for job_id, epoch in _placements_here(node):
        if (job_id, epoch) in known or not _vanished(node, job_id, epoch):
            continue
        detail = StoredText(
            gettext_noop("the agent on %(host)s restarted and its ranks of epoch %(epoch)s are gone"),
            host=node.hostname,
            epoch=epoch,
        )
        migration = lifecycle.reclaim(
            job_id,
            MigrationReason.LOST_NODE,
            detail,
            nodes=[node],
            notice_seconds=0,
            now=now,
            last_seen=node.last_heartbeat_at,
        )
        if migration is not None:
            logger.warning("job %s: %s; moving it", job_id, detail.english())
            moved.append(job_id)
    return moved


def _placements_here(node: Node) -> set[tuple[int, int]]:
    """(job, epoch) of the running jobs' current placements that hold chips on this node."""
    open_here = Allocation.objects.open().filter(node=node, job__status=JobStatus.RUNNING)
    return {
        (job_id, epoch)
        for job_id, epoch, current in open_here.values_list("job_id", "epoch", "job__epoch")
        if epoch == current
    }


def _vanished(node: Node, job_id: int, epoch: int) -> bool:
    """The agent acked starting this placement's ranks here, and not all of them have exited since."""
    started = AgentCommand.objects.filter(
        node=node, job_id=job_id, epoch=epoch, type=CommandType.START, status=CommandStatus.DONE
    ).values_list("payload", flat=True)
    ranks = {launch["rank"] for payload in started for launch in (payload or {}).get("ranks", [])}
    if not ranks:
        return False  # not started here yet (or refused): nothing could vanish
    exited = set(RankExit.objects.filter(job_id=job_id, epoch=epoch, rank__in=ranks).values_list("rank", flat=True))
    return exited != ranks
