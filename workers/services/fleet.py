"""Nodes joining, heartbeating, going silent; and which chips are free."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Sum, Value, When
from django.utils import timezone

from base.outage import database_last_unreachable
from base.tokens import hash_token
from workers.choices import AgentStatus, CommandStatus
from workers.models import AgentCommand, Allocation, EnrollmentToken, Node, new_node_token

logger = logging.getLogger(__name__)


class EnrollmentError(Exception):
    """An enrollment that can't be accepted; the message says why, `code` names the case."""

    def __init__(self, message: str, code: str = "enrollment_refused") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Enrolled:
    node: Node
    token: str


def enroll_node(
    *,
    hostname: str,
    chip_type: str,
    chips: int,
    simulated: bool,
    enrollment_token: str = "",
    node_token: str = "",
    spot_eligible: bool = False,
    address: str = "",
    seen_address: str = "",
    devices: list | None = None,
    agent_version: str = "",
) -> Enrolled:
    """Register a host, or re-register it, and return its new node token (the old one stops working).

    The node's address (where other nodes' ranks reach its ranks) is the one its agent declared, or,
    when it declared none, `seen_address`: where the platform sees its requests come from (then every
    poll keeps it current).

    A new hostname needs a usable enrollment token of its chip type's pool. An enrolled hostname is
    re-registered only by its own agent (presenting its current node token) or after the operator
    reset the node (no token left), so a pool's enrollment token can't take over another host.
    Declared chips never exceed what the operator approved (on the token, then on the node).
    """
    raw = new_node_token()
    with transaction.atomic():
        # Locks the hostname's row, so two enrollments of one host can't both pass the checks below.
        existing = Node.objects.select_for_update().select_related("pool__chip_type").filter(hostname=hostname).first()
        if node_token:
            if existing is None or existing.token_hash != hash_token(node_token):
                raise EnrollmentError(
                    f"The node token presented is not host '{hostname}'s current node token.", "node_token_invalid"
                )
            node = _renew(existing, chip_type, chips, raw)
        else:
            node = _enroll_with_token(existing, enrollment_token, hostname, chip_type, chips, raw)
        node.simulated, node.spot_eligible = simulated, spot_eligible
        node.address, node.address_observed = (address, False) if address else (seen_address, True)
        node.devices, node.agent_version = devices or [], agent_version
        node.save()
    return Enrolled(node=node, token=raw)


def _renew(node: Node, chip_type: str, chips: int, raw: str) -> Node:
    """The agent of an enrolled host re-registers itself: same pool, chips within its approval."""
    if node.pool.chip_type.slug != chip_type:
        raise EnrollmentError(
            f"Host '{node.hostname}' is enrolled with {node.pool.chip_type.slug} chips, not {chip_type}.",
            "chip_type_mismatch",
        )
    _check_chips(chips, node.approved_chips, f"host '{node.hostname}'")
    now = timezone.now()
    node.chips, node.token_hash, node.last_heartbeat_at = chips, hash_token(raw), now
    node.agent_status = heartbeat_status(node.agent_status)
    return node


def _enroll_with_token(
    existing: Node | None, enrollment_token: str, hostname: str, chip_type: str, chips: int, raw: str
) -> Node:
    token = _usable_token(enrollment_token)
    pool = token.pool
    if pool.chip_type.slug != chip_type:
        raise EnrollmentError(
            f"This enrollment token is for pool {pool.name} ({pool.chip_type.slug}), not {chip_type}.",
            "chip_type_mismatch",
        )
    _check_chips(chips, token.approved_chips, "this enrollment token")
    if existing is not None:
        if existing.pool_id != pool.pk:
            raise EnrollmentError(f"Host '{hostname}' is already enrolled in pool {existing.pool.name}.", "host_taken")
        if existing.token_hash:
            raise EnrollmentError(
                f"Host '{hostname}' is already enrolled. Re-enrolling it needs its current node token "
                "(its agent presents it) or the operator's reset of the node (admin: Nodes › Reset node).",
                "host_already_enrolled",
            )
    EnrollmentToken.objects.filter(pk=token.pk).update(uses=F("uses") + 1)
    now = timezone.now()
    node = existing or Node(hostname=hostname, pool=pool)
    node.chips, node.approved_chips, node.token_hash = chips, token.approved_chips, hash_token(raw)
    node.agent_status, node.last_heartbeat_at, node.enrolled_at = AgentStatus.ONLINE, now, now
    return node


def _usable_token(raw: str) -> EnrollmentToken:
    """The enrollment token, locked (so its uses can't be over-spent by parallel enrollments), or why not."""
    if not raw:
        raise EnrollmentError(
            "An enrollment token (or this host's node token) is required.", "enrollment_token_missing"
        )
    token = (
        EnrollmentToken.objects.select_for_update(of=("self",))
        .select_related("pool__chip_type")
        .filter(token_hash=hash_token(raw))
        .first()
    )
    if token is None:
        raise EnrollmentError("Unknown enrollment token.", "enrollment_token_invalid")
    refusal = token.refusal()
    if refusal:
        raise EnrollmentError(refusal[1], refusal[0])
    return token


def _check_chips(declared: int, approved: int, whose: str) -> None:
    if declared > approved:
        raise EnrollmentError(
            f"The agent declared {declared} chip(s) but {whose} approves at most {approved} per node; "
            "ask the operator to approve more.",
            "chips_not_approved",
        )


def authenticate_node(raw: str) -> Node | None:
    return Node.objects.select_related("pool__chip_type").filter(token_hash=hash_token(raw)).first()


# A heartbeat leaves these as they are (a drain is the operator's; a lost node returns by a clean return).
KEPT_ON_HEARTBEAT = (AgentStatus.DRAINING, AgentStatus.LOST)


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
        Node.objects.filter(pk=node.pk, agent_status=AgentStatus.LOST).update(agent_status=AgentStatus.ONLINE)
    for name, value in changes.items():
        setattr(node, name, value)
    node.agent_status = Node.objects.values_list("agent_status", flat=True).get(pk=node.pk)


def _clean_return(node: Node, ranks: list[dict]) -> bool:
    alive = [rank for rank in ranks if rank.get("state") in ("starting", "running")]
    return not alive and not AgentCommand.objects.filter(node=node, status=CommandStatus.PENDING).exists()


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
    return Node.objects.filter(
        agent_status__in=[AgentStatus.ONLINE, AgentStatus.DRAINING], last_heartbeat_at__lt=cutoff
    )


def used_chips(node_ids, now=None) -> dict[int, int]:
    """Chips held per node: by open allocations, and by reclaimed ones still inside their notice."""
    holding = Allocation.objects.holding(now or timezone.now()).filter(node_id__in=node_ids)
    rows = holding.values("node_id").annotate(used=Sum("chips"))
    return {row["node_id"]: row["used"] for row in rows}


def schedulable_nodes():
    """Nodes whose agent is online (enrolled, heartbeating, not draining)."""
    return Node.objects.filter(agent_status=AgentStatus.ONLINE).select_related("pool__chip_type")


def free_chips(nodes) -> dict[int, int]:
    nodes = list(nodes)
    used = used_chips([node.pk for node in nodes])
    return {node.pk: node.chips - used.get(node.pk, 0) for node in nodes}
