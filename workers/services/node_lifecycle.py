"""A node's life: every change of a node's `agent_status` is made here, and nowhere else.

    (new, unenrolled or reset) ─enroll─> online ─drain─> draining ─return_to_service─> online
    online, draining ─reclaim_for_maintenance─> draining (its running jobs get notice and move)
    online, draining ─declare_lost_if_silent, reset_node─> lost ─record_heartbeat (clean return)─> online
    any ─renew, record_heartbeat─> online, except that a draining or lost node stays as it is

Every arrow with the function that makes it and its callers: docs/ARCHITECTURE.md, "A node's life".

Transitions an operator or the reconciler makes lock the node's row, re-read it and do nothing when
they have already happened. A heartbeat is the exception: it is the hot path (every poll of every
agent), so it never waits for the row; its status rule is a conditional UPDATE decided on the row as
it is when written, which is what keeps a drain the operator set while a poll was in flight.

Obligations: a new status or transition goes here, in the table of docs/ARCHITECTURE.md and in the
diagram above; tests/system/test_architecture.py fails on a status write anywhere else.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.outage import database_last_unreachable
from base.stored_text import StoredText
from fleet.choices import AgentStatus, CommandStatus, JobStatus, MigrationReason
from fleet.models import Allocation, Node
from workers.models import AgentCommand
from workers.services import lifecycle

logger = logging.getLogger(__name__)

CONNECTED = (AgentStatus.ONLINE, AgentStatus.DRAINING)  # an agent polling for work, or finishing it
# A heartbeat leaves these as they are (a drain is the operator's; a lost node returns by a clean return).
KEPT_ON_HEARTBEAT = (AgentStatus.DRAINING, AgentStatus.LOST)


@dataclass(frozen=True)
class NodeChange:
    """What an operator's transition did: the status before and after, and the jobs it moved."""

    before: str
    after: str
    jobs_moved: list[int] = field(default_factory=list)

    def audit(self) -> dict[str, dict[str, str]]:
        """The status before and after, as the operator's audit entry (base.audit.record) takes them."""
        return {"before": {"agent_status": self.before}, "after": {"agent_status": self.after}}


# Enrollment and heartbeats ----------------------------------------------------------------------


def enroll(node: Node, now: datetime) -> None:
    """A host enrolled with an enrollment token (new, seeded, or taken over after a reset) is online.

    Call inside enrollment.enroll_node's transaction, which locked the hostname's row (the row may not
    exist yet) and saves the node with the rest of the enrollment.
    """
    node.agent_status, node.last_heartbeat_at, node.enrolled_at = AgentStatus.ONLINE, now, now


def renew(node: Node, now: datetime) -> None:
    """Its own agent re-enrolled the host (with its node token): for its status, a heartbeat.
    Call as `enroll`, inside enrollment.enroll_node's transaction."""
    node.last_heartbeat_at = now
    node.agent_status = heartbeat_status(node.agent_status)


def heartbeat_status(current: str) -> str:
    """A draining node stays draining and a lost one stays lost; else it is online."""
    return current if current in KEPT_ON_HEARTBEAT else AgentStatus.ONLINE


def record_heartbeat(
    node: Node, health: dict, ranks: list[dict] | None = None, now=None, seen_address: str | None = None
) -> None:
    """A poll: the node is alive. A draining node stays draining and a lost one stays lost, decided
    on the row as it is when written, so a drain the operator sets while this poll is in flight is
    never overwritten. A node declared lost comes back into service only once it has acked every
    command queued for it (the kills of its fenced ranks) and reports no live rank, so no new work
    lands beside ranks of a placement that was moved elsewhere. A node whose address is observed
    (its agent declared none) takes the address this poll came from (`seen_address`)."""
    now = now or timezone.now()
    changes = {"last_heartbeat_at": now, "health": health}
    if node.address_observed and seen_address and seen_address != node.address:
        logger.info("node %s is now seen at %s (was %s)", node.hostname, seen_address, node.address or "unknown")
        changes["address"] = seen_address
    status = Case(When(agent_status__in=KEPT_ON_HEARTBEAT, then=F("agent_status")), default=Value(AgentStatus.ONLINE))
    Node.objects.filter(pk=node.pk).update(agent_status=status, **changes)
    if node.agent_status == AgentStatus.LOST and _clean_return(node, ranks or []):
        # Conditional: a reset or a second loss between the two statements is not undone.
        Node.objects.filter(pk=node.pk, agent_status=AgentStatus.LOST).update(agent_status=AgentStatus.ONLINE)
    for name, value in changes.items():
        setattr(node, name, value)
    node.agent_status = Node.objects.values_list("agent_status", flat=True).get(pk=node.pk)


def _clean_return(node: Node, ranks: list[dict]) -> bool:
    alive = [rank for rank in ranks if rank.get("state") in ("starting", "running")]
    return not alive and not AgentCommand.objects.filter(node=node, status=CommandStatus.PENDING).exists()


# record_heartbeat's status rule for many rows at once, decided on each row as it is when written; a
# row is written only while the node token that polled is still the node's.
HEARTBEATS = (
    "UPDATE workers_node AS n SET last_heartbeat_at = v.seen, health = v.health::jsonb,"
    " agent_status = CASE WHEN n.agent_status = ANY(%s) THEN n.agent_status ELSE %s END"
    " FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[], %s::text[]) AS v(id, seen, health, token_hash)"
    " WHERE n.id = v.id AND n.token_hash = v.token_hash"
)


def record_heartbeats(seen: dict[int, tuple[datetime, dict, str]]) -> int:
    """Polls of many online or draining nodes in one UPDATE (the agent service's batch,
    workers.services.heartbeats): node id -> (when, health, the polling token's hash). The rows
    written; a database error is the caller's to keep the batch for."""
    ids = list(seen)
    params = [
        list(KEPT_ON_HEARTBEAT),
        AgentStatus.ONLINE,
        ids,
        [seen[node_id][0] for node_id in ids],
        [json.dumps(seen[node_id][1]) for node_id in ids],
        [seen[node_id][2] for node_id in ids],
    ]
    with connection.cursor() as cursor:
        cursor.execute(HEARTBEATS, params)
        return cursor.rowcount


# Lost nodes -------------------------------------------------------------------------------------


def silence_cutoff(now: datetime) -> datetime | None:
    """A node whose last heartbeat is older than this is silent; None while no node can be.

    The deadline counts only time the platform could hear: while the database is unreachable no
    heartbeat can be written, so once it is back every node looks silent. A node's silence is
    measured from the later of its last heartbeat and the last moment a process found the database
    away (base.outage), so after an outage every agent has the whole deadline to poll again (#28)."""
    cutoff = now - timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S)
    away = database_last_unreachable()
    return None if away is not None and away >= cutoff else cutoff


def silent_nodes(now=None):
    """Online nodes whose agent has not polled within the heartbeat deadline (of time the platform could hear)."""
    cutoff = silence_cutoff(now or timezone.now())
    if cutoff is None:
        return Node.objects.none()
    return Node.objects.filter(agent_status__in=CONNECTED, last_heartbeat_at__lt=cutoff)


def declare_lost_if_silent(node_id: int, now: datetime) -> bool:
    """The reconciler: a node silent past the heartbeat deadline is lost, and its jobs resume elsewhere
    from their last checkpoint. True when this call declared it lost."""
    with transaction.atomic():
        # The node before its jobs, against the usual order: they hold open allocations on this
        # node, so none of them is being placed (docs/ARCHITECTURE.md, "Locks").
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.agent_status not in CONNECTED:
            return False
        cutoff = silence_cutoff(now)  # again, under the lock: it polled meanwhile, or the database was away
        if cutoff is None or (node.last_heartbeat_at and node.last_heartbeat_at >= cutoff):
            return False
        if node.last_heartbeat_at:
            silent = gettext_noop("node %(host)s went silent (no heartbeat for %(seconds).0fs)")
            seconds = {"seconds": (now - node.last_heartbeat_at).total_seconds()}
        else:
            silent, seconds = gettext_noop("node %(host)s went silent (no heartbeat for ever)"), {}
        _declare_lost(node, StoredText(silent, host=node.hostname, **seconds), now)
    logger.warning("node %s declared lost", node.hostname)
    return True


def reset_node(node_id: int, by: str, now: datetime | None = None) -> NodeChange:
    """Operator: revoke the host's node token and treat it as lost (its jobs move at once, fenced);
    the next enrollment of the hostname with a usable enrollment token takes it over."""
    now = now or timezone.now()
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        before = node.agent_status
        node.token_hash = None
        node.save(update_fields=["token_hash"])
        if node.agent_status in CONNECTED:
            _declare_lost(
                node, StoredText(gettext_noop("node %(host)s was reset by %(by)s"), host=node.hostname, by=by), now
            )
    return NodeChange(before, node.agent_status)


def _declare_lost(node: Node, detail: str | StoredText, now: datetime) -> None:
    """The node is gone: fence every job placed on it at once and move it (or end it when it can't move).

    Call with the node's row locked. Its agent, should it come back, finds a kill command for each
    job's ranks queued before anything else (see record_heartbeat).
    """
    last_seen = node.last_heartbeat_at
    node.agent_status = AgentStatus.LOST
    node.save(update_fields=["agent_status"])
    job_ids = list(Allocation.objects.open().filter(node=node).values_list("job_id", flat=True).distinct())
    for job_id in job_ids:
        moved = lifecycle.reclaim(
            job_id, MigrationReason.LOST_NODE, detail, nodes=[node], notice_seconds=0, now=now, last_seen=last_seen
        )
        if moved is None:  # not running (starting or stopping): it can't go on without the node
            lifecycle.end_without_node(job_id, detail, now)


# The operator's drain and maintenance -----------------------------------------------------------


def drain(node_id: int) -> NodeChange | None:
    """Operator: an online node takes no new work; its running jobs finish where they are.
    None when it is not online (drained already, or not connected)."""
    return _move(node_id, AgentStatus.ONLINE, AgentStatus.DRAINING)


def return_to_service(node_id: int) -> NodeChange | None:
    """Operator: a draining node takes new work again. None when it is not draining."""
    return _move(node_id, AgentStatus.DRAINING, AgentStatus.ONLINE)


def _move(node_id: int, before: str, after: str) -> NodeChange | None:
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.agent_status != before:
            return None
        node.agent_status = after
        node.save(update_fields=["agent_status"])
    return NodeChange(before, after)


def reclaim_for_maintenance(
    node_id: int, detail: str, notice_seconds: int, now: datetime | None = None
) -> NodeChange | None:
    """Operator: the node goes into maintenance. It drains, and every job placed or running on it gets
    `notice_seconds` to checkpoint and move. None when its agent is no longer connected (lost, reset
    meanwhile): a lost node's jobs were moved already."""
    now = now or timezone.now()
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        before = node.agent_status
        if before not in CONNECTED:
            return None
        node.agent_status = AgentStatus.DRAINING
        node.save(update_fields=["agent_status"])
        moved = [
            job_id
            for job_id in running_job_ids(node)
            if lifecycle.reclaim(
                job_id, MigrationReason.MAINTENANCE, detail, nodes=[node], notice_seconds=notice_seconds, now=now
            )
        ]
    return NodeChange(before, node.agent_status, moved)


def running_job_ids(node: Node) -> list[int]:
    """Jobs with chips on this node now that are placed or running (a migrating job is already moving)."""
    return sorted(
        set(
            Allocation.objects.open()
            .filter(node=node, job__status__in=[JobStatus.PROVISIONING, JobStatus.RUNNING])
            .values_list("job_id", flat=True)
        )
    )
