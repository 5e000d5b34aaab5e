"""Which chips are free: held by open allocations (and by reclaimed ones inside their notice), on
nodes whose agent is online."""

from __future__ import annotations

from django.db.models import Sum
from django.utils import timezone

from fleet.choices import AgentStatus
from fleet.models import Allocation, Node


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
