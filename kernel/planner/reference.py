"""The planner as it grouped and ordered free chips before 100,000-chip fleets: the reference.

`fleet.build_kinds` now walks the offers once and sorts only the pools a plan can reach; this is
the straightforward version it replaced (one `on_node` call per offer, every tier sorted whole),
frozen here so tests (tests/kernel/planner/test_plan_identity.py) and `bench/planner.py` can check that
every plan is still identical and measure the gain. Nothing in the platform calls it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from kernel.planner.fleet import Kind, Slot
from kernel.planner.quote import _quote
from kernel.planner.search import optimise
from kernel.planner.throughput import ThroughputModel
from kernel.planner.types import ON_DEMAND, SPOT, ChipInfo, NodeOffer, Plan, PlanRequest


def reference_plan(
    request: PlanRequest,
    chips: Sequence[ChipInfo],
    offers: Sequence[NodeOffer],
    throughput: ThroughputModel | None = None,
) -> Plan:
    """`planner.plan` with the kinds built the old way."""
    return _quote(request, chips, offers, throughput or ThroughputModel(), optimise, build=reference_kinds)


def reference_kinds(
    request: PlanRequest, chips: Sequence[ChipInfo], offers: Sequence[NodeOffer], throughput: ThroughputModel
) -> list[Kind]:
    """Group usable free chips into kinds, sorted by chip slug, fastest first, real first (determinism)."""
    by_slug = {chip.slug: chip for chip in chips}
    groups: dict[tuple, list[NodeOffer]] = defaultdict(list)
    for node in offers:
        if _usable(node, request, by_slug):
            speed, source, measure = throughput.on_node(request.model, by_slug[node.chip], node)
            overhead, spread = (measure.overhead_s, measure.spread) if measure else (0.0, 0.0)
            groups[(node.chip, speed, source, overhead, spread, node.simulated)].append(node)
    reference = {slug: throughput.tokens_per_s(request.model, chip) for slug, chip in by_slug.items()}
    kinds = [
        Kind(
            chip=by_slug[slug],
            multiplier=speed / reference[slug],
            speed=speed,
            source=source,
            slots=_ordered_slots(by_slug[slug], nodes, request),
            simulated=simulated,
            overhead_s=overhead,
            spread=spread,
        )
        for (slug, speed, source, overhead, spread, simulated), nodes in groups.items()
    ]
    kinds = [kind for kind in kinds if kind.slots]
    return sorted(kinds, key=lambda k: (k.slug, -k.speed, k.simulated, k.overhead_s, k.spread))


def _usable(node: NodeOffer, request: PlanRequest, by_slug: dict) -> bool:
    if node.free_chips <= 0 or node.chip not in by_slug:
        return False
    return node.spot_eligible or not request.spot_only


def _ordered_slots(chip: ChipInfo, nodes: list[NodeOffer], request: PlanRequest) -> list[Slot]:
    """The kind's chips in taking order, only as many as one job may use."""
    spot = request.spot_only or (request.allow_spot and chip.spot_per_hour < chip.on_demand_per_hour)
    tiers = [(SPOT, [n for n in nodes if n.spot_eligible])] if spot else []
    rest = [] if request.spot_only else [n for n in nodes if not (spot and n.spot_eligible)]
    tiers.append((ON_DEMAND, rest))
    prices = {SPOT: chip.spot_per_hour, ON_DEMAND: chip.on_demand_per_hour}
    slots: list[Slot] = []
    for mode, tier in tiers:
        for node in _pool_first(tier):
            take = min(node.free_chips, request.max_ranks - len(slots))
            slots.extend([Slot(node, mode, prices[mode])] * take)
            if len(slots) >= request.max_ranks:
                return slots
    return slots


def _pool_first(nodes: list[NodeOffer]) -> list[NodeOffer]:
    pool_free: dict[str, int] = defaultdict(int)
    for node in nodes:
        pool_free[node.pool] += node.free_chips
    return sorted(nodes, key=lambda n: (-pool_free[n.pool], n.pool, -n.free_chips, n.node_id))
