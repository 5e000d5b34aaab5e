"""Scoring one candidate mix: a count of ranks per kind -> ZeRO stage, split, step time, price.

Everything the optimiser compares comes from here, and so does the final plan, so the search,
the exhaustive reference and the quote can never disagree about what a mix is worth.

Policy objectives (all minimised; work is counted in tokens, because with a global batch of
per-device batch x ranks a bigger mix also trains on more data per step):

    fastest           seconds per token             = 1 / tokens_per_s
    cheapest          money per token               = price_per_hour / tokens_per_s
    cost-performance  money per token x seconds per token = price_per_hour / tokens_per_s^2

Money per token alone is minimised by a single chip (collectives only ever add time), which
would make cost-performance ignore the budget and equal cheapest. Its product with seconds per
token weighs speed and cost-efficiency equally: a mix fills the budget with the most
cost-effective chips and adds a chip only if its marginal tokens per money is at least half the
mix's average. Ties go to the lower price, then to the count vector in kind order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from kernel.money import round_micros
from kernel.planner.fleet import Kind
from kernel.planner.islands import DEFAULT, DEFAULT_BRIDGE_GBPS, Bridge, bridge_for, slowest
from kernel.planner.memory import GIB, ZERO_STAGES, activation_bytes_per_sample, fixed_bytes
from kernel.planner.split import GroupShare, largest_remainder, split_groups
from kernel.planner.throughput import MEASURED_ON_NODE, comm_seconds
from kernel.planner.types import PlanRequest

Counts = tuple[int, ...]
_UNSEEN = object()


@dataclass(slots=True)
class Candidate:
    """A scored mix (shares are recomputed for the winner only; see `Evaluator.shares`)."""

    counts: Counts
    ranks: int
    price_per_hour: int
    zero_stage: int
    global_batch: int
    caps: tuple[int, ...]
    compute_seconds: float
    comm_seconds: float
    cross_pool: bool
    tokens_per_s: float
    eta_seconds: float
    bridge: Bridge | None = None  # its islands' bridge; None: one island


def total_cost(price_per_hour: int, eta_seconds: float) -> int:
    """The job's estimated total: price x time, rounded once, half up.

    An estimate from float seconds, never charged: what is charged for time is `kernel.money.cost_over`,
    over whole microseconds."""
    return round_micros(Decimal(price_per_hour) * Decimal(eta_seconds) / 3600)


OBJECTIVES: dict[str, Callable[[Candidate], tuple]] = {
    "fastest": lambda c: (1.0 / c.tokens_per_s, c.price_per_hour, c.counts),
    "cheapest": lambda c: (c.price_per_hour / c.tokens_per_s, 1.0 / c.tokens_per_s, c.counts),
    "cost-performance": lambda c: (c.price_per_hour / c.tokens_per_s**2, c.price_per_hour, c.counts),
    # Used only to name the cheapest possible hourly price when a budget is too low.
    "hourly-price": lambda c: (c.price_per_hour, 1.0 / c.tokens_per_s, c.counts),
}


def objective_value(result: Candidate | object, policy: str) -> float:
    """The number a policy minimises, for a candidate or a `Plan` (what "within 1%" is about)."""
    price, speed = result.price_per_hour, result.tokens_per_s
    if policy == "fastest":
        return 1.0 / speed
    if policy == "cheapest":
        return price / speed
    return price / speed**2


class Evaluator:
    """Scores count vectors for one request over one set of kinds, memoised."""

    def __init__(self, request: PlanRequest, kinds: list[Kind], hourly_budget: int | None) -> None:
        self.request, self.kinds, self.budget = request, kinds, hourly_budget
        self.model = request.model
        self.params = request.model.parameters
        self.act = activation_bytes_per_sample(self.model)
        self.memories = [kind.chip.memory_gib * GIB for kind in kinds]
        self.speeds = [kind.speed for kind in kinds]
        self.simulated = [kind.simulated for kind in kinds]
        self.islands = [kind.island for kind in kinds]
        self.trainable = request.model.trainable_parameters or request.model.parameters
        self.on_node = [kind.source == MEASURED_ON_NODE for kind in kinds]
        self.overheads = [kind.overhead_s for kind in kinds]
        self._stages: dict[int, tuple[list[int], list[tuple[int, ...]]]] = {}
        self._cache: dict[Counts, Candidate | None] = {}
        # Key-independent facts the optimiser derives once per request (sweep points, price segments).
        self.memo: dict[tuple, object] = {}

    def price(self, counts: Counts) -> int:
        return sum(kind.price_prefix[c] for kind, c in zip(self.kinds, counts, strict=True) if c)

    def global_batch(self, ranks: int) -> int:
        return self.request.global_batch or self.request.per_device_batch_size * ranks

    def evaluate(self, counts: Counts) -> Candidate | None:
        result = self._cache.get(counts, _UNSEEN)
        if result is _UNSEEN:
            result = self._cache[counts] = self._score(counts)
        return result

    def violation(self, counts: Counts) -> float:
        """How far a mix is from feasible (0: feasible), so a repair search can walk towards one."""
        if self.evaluate(counts) is not None:
            return 0.0
        ranks = sum(counts)
        if ranks == 0:
            return math.inf
        batch = self.global_batch(ranks)
        over = max(ranks - self.request.max_ranks, 0) / ranks + max(ranks - batch, 0) / ranks
        if self.budget is not None:
            over += max(self.price(counts) - self.budget, 0) / self.budget
        caps = self._stage_table(ranks)[1][-1]
        used = [i for i, c in enumerate(counts) if c]
        homeless = sum(counts[i] for i in used if caps[i] < 1) / ranks
        deficit = max(batch - sum(counts[i] * caps[i] for i in used), 0) / batch
        # Only the total budget is left: rank the mix by its price.
        return over + homeless + deficit or 1.0 + self.price(counts) / (self.request.total_budget or 1)

    @property
    def evaluations(self) -> int:
        return len(self._cache)

    def shares(self, candidate: Candidate) -> list[GroupShare | None]:
        """Per kind, how its ranks share the global batch (None for kinds not used)."""
        used = [i for i, c in enumerate(candidate.counts) if c]
        groups = split_groups(
            candidate.global_batch,
            [candidate.counts[i] for i in used],
            [self.speeds[i] for i in used],
            [candidate.caps[i] for i in used],
        )
        shares: list[GroupShare | None] = [None] * len(candidate.counts)
        for i, share in zip(used, groups, strict=True):
            shares[i] = share
        return shares

    def _score(self, counts: Counts) -> Candidate | None:
        ranks = sum(counts)
        batch = self.request.global_batch or self.request.per_device_batch_size * ranks
        if ranks == 0 or ranks > self.request.max_ranks or ranks > batch:
            return None  # too many ranks (or more ranks than samples)
        used = [i for i, c in enumerate(counts) if c]
        islands = self.request.islands
        if not islands and len({self.simulated[i] for i in used}) > 1:
            return None  # real and simulated ranks can't share a process group (kernel.planner.islands)
        price = sum(self.kinds[i].price_prefix[counts[i]] for i in used)
        if self.budget is not None and price > self.budget:
            return None  # over budget
        fitted = self._fit(counts, used, ranks, batch)
        if fitted is None:
            return None  # no ZeRO stage fits
        stage, caps = fitted
        if len(used) == 1:  # one kind: equal shares, no water-filling needed
            bases, extras = [batch // ranks], [batch % ranks]
        else:
            bases, extras = largest_remainder(
                batch, [counts[i] for i in used], [self.speeds[i] for i in used], [caps[i] for i in used]
            )
        seq = self.model.seq_len
        compute = max((b + (1 if e else 0)) * seq / self.speeds[i] for i, b, e in zip(used, bases, extras, strict=True))
        cross = self._cross_pool(counts, used)
        # A speed measured on the node already holds its waits for peers and its collectives.
        measured = all(self.on_node[i] for i in used)
        step = compute + (0.0 if measured else comm_seconds(self.params, stage, self._world(counts, used), cross))
        bridge = self._bridge(used, step) if islands else None
        if bridge is not None:
            step += bridge.exposed_per_step(step)
        eta = self.request.max_steps * step + max(self.overheads[i] for i in used)
        total_budget = self.request.total_budget
        if total_budget is not None and total_cost(price, eta) > total_budget:
            return None  # over budget
        return Candidate(
            counts, ranks, price, stage, batch, caps, compute, step - compute, cross, batch * seq / step, eta, bridge
        )

    def _world(self, counts: Counts, used: list[int]) -> int:
        """Ranks in the largest DeepSpeed world of the mix: all of them, or with islands the biggest island."""
        if not self.request.islands:
            return sum(counts[i] for i in used)
        per_island: dict[str, int] = {}
        for i in used:
            per_island[self.islands[i]] = per_island.get(self.islands[i], 0) + counts[i]
        return max(per_island.values())

    def _bridge(self, used: list[int], step_seconds: float) -> Bridge | None:
        """The bridge between the mix's islands (None: one island)."""
        islands = {self.islands[i] for i in used}
        if len(islands) < 2:
            return None
        kinds = [self.kinds[i] for i in used]
        known = [(kind.bridge_gbps, kind.bridge_source) for kind in kinds if kind.bridge_gbps > 0]
        gbps, source = slowest(known) if known else (DEFAULT_BRIDGE_GBPS, DEFAULT)
        request = self.request
        return bridge_for(
            len(islands), self.trainable, step_seconds, gbps, request.sync_mode, request.sync_every, source
        )

    def holds_a_sample(self, i: int, ranks: int) -> bool:
        """Whether a rank of kind i fits one sample at some ZeRO stage in a job of `ranks` ranks."""
        return self._stage_table(ranks)[0][i] < len(ZERO_STAGES)

    def single_kind_stage(self, i: int, count: int) -> int:
        """The ZeRO stage `count` ranks of kind i alone would need (4: they don't fit)."""
        caps_by_stage = self._stage_table(count)[1]
        batch = self.global_batch(count)
        return next((s for s in ZERO_STAGES if caps_by_stage[s][i] >= 1 and count * caps_by_stage[s][i] >= batch), 4)

    def _fit(self, counts: Counts, used: list[int], ranks: int, batch: int) -> tuple[int, tuple[int, ...]] | None:
        """The lowest ZeRO stage at which every used kind holds a sample and all hold the batch."""
        first, caps_by_stage = self._stage_table(ranks)
        lowest = max(first[i] for i in used)
        for stage in range(lowest, len(ZERO_STAGES)):
            caps = caps_by_stage[stage]
            # (A later stage needs no less memory per rank only for one rank: its gather buffer.)
            if sum(counts[i] * caps[i] for i in used) >= batch and all(caps[i] for i in used):
                return stage, caps
        return None

    def _stage_table(self, ranks: int) -> tuple[list[int], list[tuple[int, ...]]]:
        """Per stage, each kind's micro-batch cap at this world size; per kind, its first fitting stage."""
        if ranks not in self._stages:
            caps_by_stage = []
            for stage in ZERO_STAGES:
                fixed = fixed_bytes(self.model, stage, ranks)
                caps_by_stage.append(tuple(max(int((m - fixed) // self.act), 0) for m in self.memories))
            first = [
                next((s for s in ZERO_STAGES if caps_by_stage[s][i] >= 1), len(ZERO_STAGES))
                for i in range(len(self.kinds))
            ]
            self._stages[ranks] = (first, caps_by_stage)
        return self._stages[ranks]

    def _cross_pool(self, counts: Counts, used: list[int]) -> bool:
        if len(used) == 1:
            return len(self.kinds[used[0]].pools_prefix[counts[used[0]]]) > 1
        pools: set[str] = set()
        for i in used:
            pools |= self.kinds[i].pools_prefix[counts[i]]
        return len(pools) > 1
