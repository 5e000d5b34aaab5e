"""The free fleet as the optimiser sees it: a few *kinds* of identical ranks, not thousands of chips.

A kind is one chip type at one speed on one backend: simulated nodes (CPU, gloo) form their own
kinds, apart from real ones (CUDA, NCCL), whatever their speed; a plan never mixes the two
(`backends`). Its chips are put in the order the planner would take them: spot chips first when
the job allows spot (same speed, lower price), then the pool with the most free chips, nodes
with the most free chips, node id. Taking c chips of a kind always means its first c chips, so
the price and the pools of any count are prefix sums computed once; the optimiser then only
chooses a count per kind, and exhaustive search and heuristic agree on what a count means.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from kernel.planner.islands import link_of
from kernel.planner.throughput import ThroughputModel
from kernel.planner.types import ON_DEMAND, SPOT, ChipInfo, NodeOffer, PlanRequest
from kernel.stacks import CATALOG_STACKS, island_of


class KindKey(NamedTuple):
    """What makes nodes one kind."""

    chip: str
    speed: float
    source: str
    overhead_s: float
    spread: float
    simulated: bool


@dataclass(frozen=True)
class Slot:
    """One chip the plan may take: where it is and what it costs per hour."""

    node: NodeOffer
    mode: str
    price: int


@dataclass
class Kind:
    """Identical ranks: one chip type at one speed on one backend, with its chips in taking order."""

    chip: ChipInfo
    multiplier: float
    speed: float
    source: str
    slots: list[Slot]
    simulated: bool = False
    overhead_s: float = 0.0  # measured start-up + finishing per job on these nodes (0: not measured)
    spread: float = 0.0  # how much measured runs on these nodes vary (relative)
    price_prefix: list[int] = field(default_factory=list)
    pools_prefix: list[frozenset[str]] = field(default_factory=list)

    limit: int = 0
    island: str = ""  # its chip's stack, "-simulated" for simulated chips (kernel/stacks.py)
    bridge_gbps: float = 0.0  # the slowest link to other islands its nodes have (islands.link_of; 0: none known)
    bridge_source: str = ""  # where that figure came from: measured or declared

    def __post_init__(self) -> None:
        self.limit = len(self.slots)  # read in the optimiser's inner loop: a plain attribute
        self.island = island_of(self.chip.stack or CATALOG_STACKS.get(self.chip.slug, "unknown"), self.simulated)
        self.bridge_gbps, self.bridge_source = link_of(slot.node for slot in self.slots)
        self.price_prefix, self.pools_prefix = [0], [frozenset()]
        for slot in self.slots:
            self.price_prefix.append(self.price_prefix[-1] + slot.price)
            pool = slot.node.pool
            last = self.pools_prefix[-1]
            self.pools_prefix.append(last if pool in last else last | {pool})

    @property
    def slug(self) -> str:
        return self.chip.slug

    def unit_price(self, count: int) -> int:
        """Price of the `count`-th chip (1-based): spot chips come first."""
        return self.price_prefix[count] - self.price_prefix[count - 1]


def build_kinds(
    request: PlanRequest, chips: Sequence[ChipInfo], offers: Sequence[NodeOffer], throughput: ThroughputModel
) -> list[Kind]:
    """Group usable free chips into kinds, sorted by chip slug, fastest first, real first (determinism)."""
    by_slug = {chip.slug: chip for chip in chips}
    groups = _bounded(_grouped(request, by_slug, offers, throughput), MAX_KINDS)
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


def _grouped(
    request: PlanRequest, by_slug: dict[str, ChipInfo], offers: Sequence[NodeOffer], throughput: ThroughputModel
) -> dict[KindKey, list[NodeOffer]]:
    """Usable offers per kind key (chip, speed, source, overhead, spread, simulated), keys in the order
    their first offer comes, nodes in offer order (the order kinds and slots are built in).

    This is the one walk over every offer (100,000 free chips are ~20,000 offers), so it stays lean:
    a plain `ThroughputModel` gives every node it has no measurement of the same speed for one chip
    type and backend, so it is asked once per (chip, simulated) and again only for measured nodes.
    A subclass (other per-node speeds) is asked about every node.
    """
    groups: dict[KindKey, list[NodeOffer]] = {}
    unmeasured: dict[tuple[str, bool], list[NodeOffer]] = {}  # (chip, simulated) -> that kind's node list
    shared_speeds = type(throughput) is ThroughputModel
    per_node, spot_only, model = throughput.per_node, request.spot_only, request.model
    for node in offers:
        if node.free_chips <= 0 or (spot_only and not node.spot_eligible):
            continue
        chip = by_slug.get(node.chip)
        if chip is None:
            continue
        if shared_speeds and node.node_id not in per_node:
            members = unmeasured.get((node.chip, node.simulated))
            if members is None:
                key = _kind_key(model, chip, node, throughput)
                members = unmeasured[(node.chip, node.simulated)] = groups.setdefault(key, [])
            members.append(node)
        else:
            groups.setdefault(_kind_key(model, chip, node, throughput), []).append(node)
    return groups


# The search grows faster than the square of the number of kinds, and every node measured on the
# model (or only on others: its start-up time) is a kind of its own: with 200 of them in a 100k fleet
# one plan took 22 s of CPU. Past this many kinds, measured nodes are merged (`_bounded`).
MAX_KINDS = 16


def _bounded(groups: dict[KindKey, list[NodeOffer]], limit: int) -> dict[KindKey, list[NodeOffer]]:
    """At most about `limit` kinds: past it, the kinds of one chip type, speed source and backend are
    merged into a few, each promising no more than its members (the slowest speed, the longest
    start-up, the widest spread). A fleet with `limit` kinds or fewer is planned exactly as measured.
    """
    if len(groups) <= limit:
        return groups
    classes: dict[tuple, list[KindKey]] = defaultdict(list)  # (chip, source, simulated) -> its kind keys
    for key in groups:
        classes[(key.chip, key.source, key.simulated)].append(key)
    shares = _shares({name: len(keys) for name, keys in classes.items()}, limit)
    bounded: dict[KindKey, list[NodeOffer]] = {}
    for (chip, source, simulated), keys in classes.items():
        keys.sort(key=lambda k: (-k.speed, k.overhead_s, k.spread))  # fastest first, then the shortest start-up
        chips = [sum(map(_FREE, groups[key])) for key in keys]
        for part in _contiguous(keys, chips, shares[(chip, source, simulated)]):
            overhead, spread = max(k.overhead_s for k in part), max(k.spread for k in part)
            merged = KindKey(chip, part[-1].speed, source, overhead, spread, simulated)
            bounded.setdefault(merged, []).extend(node for key in part for node in groups[key])
    return bounded


def _shares(sizes: dict[tuple, int], limit: int) -> dict[tuple, int]:
    """Kinds per class: one each, then one more at a time to the class with the most kinds per share."""
    shares = dict.fromkeys(sizes, 1)
    for _ in range(limit - len(sizes)):
        open_ = [name for name in sorted(sizes) if shares[name] < sizes[name]]
        if not open_:
            break
        widest = max(open_, key=lambda name: sizes[name] / shares[name])
        shares[widest] += 1
    return shares


def _contiguous(keys: list, chips: list[int], parts: int) -> list[list]:
    """`keys` (in order) cut into at most `parts` runs of about equal free chips."""
    total, done, runs = sum(chips), 0, [[]]
    for index, (key, size) in enumerate(zip(keys, chips, strict=True)):
        behind = parts - len(runs)  # runs still to start
        if runs[-1] and behind > 0 and (done * parts >= total * len(runs) or len(keys) - index <= behind):
            runs.append([])
        runs[-1].append(key)
        done += size
    return runs


def _kind_key(model, chip: ChipInfo, node: NodeOffer, throughput: ThroughputModel) -> KindKey:
    speed, source, measure = throughput.on_node(model, chip, node)
    overhead, spread = (measure.overhead_s, measure.spread) if measure else (0.0, 0.0)
    return KindKey(node.chip, speed, source, overhead, spread, node.simulated)


def _ordered_slots(chip: ChipInfo, nodes: list[NodeOffer], request: PlanRequest) -> list[Slot]:
    """The kind's chips in taking order, only as many as one job may use."""
    # Spot is only worth taking while it undercuts on-demand; a spot-eligible node also sells on-demand.
    spot = request.spot_only or (request.allow_spot and chip.spot_per_hour < chip.on_demand_per_hour)
    if request.spot_only:  # every usable node is spot-eligible
        tiers = [(SPOT, nodes)]
    elif spot:
        tiers = [(SPOT, [n for n in nodes if n.spot_eligible]), (ON_DEMAND, [n for n in nodes if not n.spot_eligible])]
    else:
        tiers = [(ON_DEMAND, nodes)]
    prices = {SPOT: chip.spot_per_hour, ON_DEMAND: chip.on_demand_per_hour}
    slots: list[Slot] = []
    for mode, tier in tiers:
        for node in _pool_first(tier):
            take = min(node.free_chips, request.max_ranks - len(slots))
            slots.extend([Slot(node, mode, prices[mode])] * take)
            if len(slots) >= request.max_ranks:
                return slots
    return slots


_FREE, _NODE_ID = attrgetter("free_chips"), attrgetter("node_id")


def _pool_first(nodes: list[NodeOffer]) -> Iterator[NodeOffer]:
    """Fewest pools and nodes: the biggest pool first, inside it the biggest nodes, then node id.

    Lazy: a job takes at most `max_ranks` chips, usually from the first pool, so only the pools it
    reaches are sorted (two stable sorts: by node id, then by free chips, most first).
    """
    pools: dict[str, list[NodeOffer]] = defaultdict(list)
    for node in nodes:
        pools[node.pool].append(node)
    pool_free = {pool: sum(map(_FREE, members)) for pool, members in pools.items()}
    for pool in sorted(pools, key=lambda p: (-pool_free[p], p)):
        members = sorted(pools[pool], key=_NODE_ID)
        members.sort(key=_FREE, reverse=True)
        yield from members
