"""Nodes joining, heartbeating, going silent; and which chips are free."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from workers.choices import AgentStatus
from workers.models import Allocation, ChipType, EnrollmentToken, Node, hash_secret, new_node_token


class EnrollmentError(Exception):
    """An enrollment that can't be accepted; the message says why."""


@dataclass(frozen=True)
class Enrolled:
    node: Node
    token: str


def enroll_node(
    *,
    enrollment_token: str,
    hostname: str,
    chip_type: str,
    chips: int,
    simulated: bool,
    spot_eligible: bool = False,
    address: str = "",
    devices: list | None = None,
    agent_version: str = "",
) -> Enrolled:
    """Register (or re-register) a host in the token's pool; returns its new node token."""
    token = (
        EnrollmentToken.objects.select_related("pool__chip_type")
        .filter(token_hash=hash_secret(enrollment_token))
        .first()
    )
    if token is None or not token.is_usable:
        raise EnrollmentError("Invalid, expired or revoked enrollment token.")
    if not ChipType.objects.filter(slug=chip_type).exists():
        raise EnrollmentError(f"Unknown chip type '{chip_type}'.")
    if token.pool.chip_type.slug != chip_type:
        raise EnrollmentError(
            f"This enrollment token is for pool {token.pool.name} ({token.pool.chip_type.slug}), not {chip_type}."
        )
    raw = new_node_token()
    now = timezone.now()
    fields = {
        "pool": token.pool,
        "chips": chips,
        "simulated": simulated,
        "spot_eligible": spot_eligible,
        "address": address,
        "devices": devices or [],
        "agent_version": agent_version,
        "token_hash": hash_secret(raw),
        "agent_status": AgentStatus.ONLINE,
        "last_heartbeat_at": now,
        "enrolled_at": now,
    }
    with transaction.atomic():
        existing = Node.objects.select_for_update().filter(hostname=hostname).first()
        if existing and existing.pool_id != token.pool_id:
            raise EnrollmentError(f"Host '{hostname}' is already enrolled in pool {existing.pool.name}.")
        node, _ = Node.objects.update_or_create(hostname=hostname, defaults=fields)
        EnrollmentToken.objects.filter(pk=token.pk).update(uses=token.uses + 1)
    return Enrolled(node=node, token=raw)


def authenticate_node(raw: str) -> Node | None:
    return Node.objects.select_related("pool__chip_type").filter(token_hash=hash_secret(raw)).first()


def record_heartbeat(node: Node, health: dict, now=None) -> None:
    now = now or timezone.now()
    status = node.agent_status if node.agent_status == AgentStatus.DRAINING else AgentStatus.ONLINE
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now, health=health, agent_status=status)


def silent_nodes(now=None):
    """Online nodes whose agent has not polled within the heartbeat deadline."""
    now = now or timezone.now()
    deadline = now - timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S)
    return Node.objects.filter(
        agent_status__in=[AgentStatus.ONLINE, AgentStatus.DRAINING], last_heartbeat_at__lt=deadline
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
