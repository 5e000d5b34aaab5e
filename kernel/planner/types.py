"""The planner's inputs and outputs: plain dataclasses, money in integer micro-units per chip-hour.

Nothing here imports Django: the API layer turns models into these and `Plan.to_dict()` back
into JSON, so the planner can be tested and benchmarked without a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kernel.catalog import chip_specs
from kernel.modelspecs import ModelSpec
from kernel.money import to_micros
from kernel.planner.islands import Bridge

POLICIES = ("cost-performance", "fastest", "cheapest", "single-type")
ON_DEMAND, SPOT = "on_demand", "spot"
# Enough for llama-2-70b at ZeRO-3 on 24-32 GiB chips, small enough that one job can't take a region.
DEFAULT_MAX_RANKS = 128


@dataclass(frozen=True)
class ChipInfo:
    """A chip type's specs and current prices (micro-units per chip-hour)."""

    slug: str
    memory_gib: int
    bf16_tflops: float
    default_mfu: float
    on_demand_per_hour: int
    spot_per_hour: int
    stack: str = ""  # its software stack (kernel/stacks.py); "" reads the seed catalog's


@dataclass(frozen=True, init=False)
class NodeOffer:
    """Free chips on one node, as the scheduler sees them at planning time.

    Planning a 100,000-chip fleet builds ~20,000 of these per quote, so `__init__` is written by hand:
    a frozen dataclass's generated one sets each field through `object.__setattr__`, which took
    ~1.5x as long (18 ms against 12 ms for 16,666 offers; bench/planner.py's "offers ms"). Fields,
    defaults, equality, hash and repr are still the dataclass's.
    """

    node_id: str
    hostname: str
    chip: str
    free_chips: int
    spot_eligible: bool = False
    pool: str = ""
    zone: str = ""
    simulated: bool = False
    bridge_gbps: float = 0.0  # the node's link to other islands (measured, else its pool's declared); 0: not known
    bridge_measured: bool = False  # bridge_gbps is what the node measured (its island leader's allreduces)

    def __init__(
        self,
        node_id: str,
        hostname: str,
        chip: str,
        free_chips: int,
        spot_eligible: bool = False,
        pool: str = "",
        zone: str = "",
        simulated: bool = False,
        bridge_gbps: float = 0.0,
        bridge_measured: bool = False,
    ) -> None:
        # pool = chips of one type in one zone (links inside a pool are fast); unnamed, it is named after both.
        vars(self).update(
            node_id=node_id,
            hostname=hostname,
            chip=chip,
            free_chips=free_chips,
            spot_eligible=spot_eligible,
            pool=pool or f"{chip}@{zone}",
            zone=zone,
            simulated=simulated,
            bridge_gbps=bridge_gbps,
            bridge_measured=bridge_measured,
        )


# A placement as the job's timeline says it (the platform stores the template and values to translate it).
PLACED = "Placed on %(chips)s (ZeRO-%(stage)s)"


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for.

    Global batch = per_device_batch_size x ranks (as in Hugging Face's Trainer): the user's
    per-device batch is the *average* rank's share, and the planner re-splits the global batch by
    speed. A re-plan after a migration may pin `global_batch` so the optimisation keeps its batch.
    """

    model: ModelSpec
    per_device_batch_size: int
    max_steps: int
    policy: str = "cost-performance"
    max_budget_per_hour: int | None = None
    total_budget: int | None = None
    allow_spot: bool = False
    spot_only: bool = False
    chip_counts: Mapping[str, int] | None = None
    max_ranks: int = DEFAULT_MAX_RANKS
    global_batch: int | None = None
    # Islands (kernel/planner/islands.py): whether ranks of several stacks may train together, and the
    # job's own choice of sync mode and inner steps (None: the planner's).
    islands: bool = False
    sync_mode: str | None = None
    sync_every: int | None = None


@dataclass(frozen=True)
class Rank:
    """One training process on one chip.

    `paced_tokens_per_s`: for a simulated chip, the speed its rank is paced to (set when a plan is made
    for the platform's own fleet); None on real hardware.
    """

    chip: str
    node_id: str
    hostname: str
    pool: str
    micro_batch: int
    mode: str
    tokens_per_s: float
    memory_gib: float
    simulated: bool
    paced_tokens_per_s: float | None = None
    # Its island: its chip's stack, "-simulated" for simulated chips (kernel/stacks.py). Out of repr, as
    # `Plan.bridge`: tests/planner/golden_plans.json holds digests of plans' reprs from before islands.
    island: str = field(default="", repr=False)
    # The island's number when it was added to a running job (a new island, numbered after every earlier
    # one); None in a plan as the planner makes it, whose islands are numbered in order of appearance.
    island_index: int | None = field(default=None, repr=False)

    @property
    def is_spot(self) -> bool:
        return self.mode == SPOT

    @property
    def node_pk(self) -> int:
        """The node's database id (the platform's offers name nodes by it)."""
        return int(self.node_id)

    def to_dict(self) -> dict:
        data = {
            "chip": self.chip,
            "node_id": self.node_id,
            "hostname": self.hostname,
            "pool": self.pool,
            "micro_batch": self.micro_batch,
            "mode": self.mode,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "memory_gib": round(self.memory_gib, 2),
            "simulated": self.simulated,
            "island": self.island,
        }
        if self.island_index is not None:
            data["island_index"] = self.island_index
        if self.paced_tokens_per_s is not None:
            data["paced_tokens_per_s"] = self.paced_tokens_per_s
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> Rank:
        return cls(
            chip=data["chip"],
            node_id=str(data["node_id"]),
            hostname=data.get("hostname", ""),
            pool=data.get("pool", ""),
            micro_batch=int(data["micro_batch"]),
            mode=data.get("mode", ON_DEMAND),
            tokens_per_s=float(data.get("tokens_per_s") or 0),
            memory_gib=float(data.get("memory_gib") or 0),
            simulated=bool(data.get("simulated", False)),
            paced_tokens_per_s=data.get("paced_tokens_per_s"),
            island=data.get("island", ""),
            island_index=data.get("island_index"),
        )


@dataclass
class Plan:
    """A placement with its estimate. Money fields are integer micro-units."""

    policy: str
    model: str
    ranks: list[Rank]
    zero_stage: int
    global_batch: int
    tokens_per_step: int
    step_seconds: float
    comm_seconds: float
    link_gbps: int
    tokens_per_s: float
    price_per_hour: int
    price_per_million_tokens: int
    eta_seconds: float
    total_cost: int
    throughput_source: dict[str, str]
    baseline: Plan | None = None
    speedup_vs_baseline: float | None = None
    cost_ratio_vs_baseline: float | None = None
    chip_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    overhead_seconds: float = 0.0  # measured start-up and finishing, inside eta_seconds
    # Relative error the estimate may have (0.1: ±10%) when every rank's node has measurements;
    # None when some has none, so the speed comes from the chip's modelled figure.
    uncertainty: float | None = None
    bridge: Bridge | None = field(default=None, repr=False)  # how its islands keep in step; None: one island
    # The run's steps the ETA and cost count (a job given epochs: worked out from them); 0: unknown. Out of
    # repr, as the bridge: the recorded plans' digests (tests/kernel/planner) predate it.
    steps: int = field(default=0, repr=False)

    def islands(self) -> list[dict]:
        """Its islands in order: each one's stack, chips, ranks (their numbers), batch and modelled speed."""
        order: dict[str | int, dict] = {}
        for number, rank in enumerate(self.ranks):
            key = rank.island if rank.island_index is None else rank.island_index
            index = len(order) if rank.island_index is None else rank.island_index
            island = order.setdefault(key, _island(index, rank))
            island["chips"][rank.chip] = island["chips"].get(rank.chip, 0) + 1
            island["ranks"].append(number)
            island["batch"] += rank.micro_batch
            island["tokens_per_s"] += round(rank.tokens_per_s, 3)  # as to_dict writes it: the same after a read-back
        return list(order.values())

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def chip_types(self) -> set[str]:
        """The chip types its ranks run on."""
        return {rank.chip for rank in self.ranks}

    def spot_chip_counts(self) -> dict[str, int]:
        """Spot chips per type."""
        counts: dict[str, int] = {}
        for rank in self.ranks:
            if rank.is_spot:
                counts[rank.chip] = counts.get(rank.chip, 0) + 1
        return counts

    def ranks_on(self, node_pk: int) -> set[int]:
        """The rank numbers that run on one node."""
        return {index for index, rank in enumerate(self.ranks) if rank.node_pk == node_pk}

    def chip_mix(self) -> str:
        """ "1× rtx-4090 + 1× tpu-v5e" """
        counts: dict[str, int] = {}
        for rank in self.ranks:
            counts[rank.chip] = counts.get(rank.chip, 0) + 1
        return " + ".join(f"{count}× {chip}" for chip, count in sorted(counts.items()))

    def describe(self) -> str:
        """ "Placed on 1× rtx-4090 + 1× tpu-v5e (ZeRO-0)" (PLACED, filled in)"""
        return PLACED % {"chips": self.chip_mix(), "stage": self.zero_stage}

    def to_dict(self) -> dict:
        """JSON-ready; money stays integer micro-units for the API layer to format."""
        return {
            "policy": self.policy,
            "model": self.model,
            "world_size": self.world_size,
            "chip_counts": self.chip_counts,
            "ranks": [rank.to_dict() for rank in self.ranks],
            "zero_stage": self.zero_stage,
            "global_batch": self.global_batch,
            "tokens_per_step": self.tokens_per_step,
            "step_seconds": round(self.step_seconds, 6),
            "comm_seconds": round(self.comm_seconds, 6),
            "link_gbps": self.link_gbps,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "price_per_hour": self.price_per_hour,
            "price_per_million_tokens": self.price_per_million_tokens,
            "eta_seconds": round(self.eta_seconds, 3),
            "total_cost": self.total_cost,
            "throughput_source": self.throughput_source,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup_vs_baseline": _round(self.speedup_vs_baseline),
            "cost_ratio_vs_baseline": _round(self.cost_ratio_vs_baseline),
            "overhead_seconds": round(self.overhead_seconds, 3),
            "uncertainty": _round(self.uncertainty),
            "islands": [{**island, "tokens_per_s": round(island["tokens_per_s"], 3)} for island in self.islands()],
            "sync": self.bridge.to_dict() if self.bridge else None,
            "steps": self.steps,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Plan:
        """Back from `to_dict` (a job's stored plan). Estimates a stored plan lacks read as zero."""
        baseline = data.get("baseline")
        return cls(
            policy=data.get("policy", POLICIES[0]),
            model=data.get("model", ""),
            ranks=[Rank.from_dict(rank) for rank in data.get("ranks", [])],
            zero_stage=int(data.get("zero_stage", 0)),
            global_batch=int(data.get("global_batch") or sum(int(r["micro_batch"]) for r in data.get("ranks", []))),
            tokens_per_step=int(data.get("tokens_per_step") or 0),
            step_seconds=float(data.get("step_seconds") or 0),
            comm_seconds=float(data.get("comm_seconds") or 0),
            link_gbps=int(data.get("link_gbps") or 0),
            tokens_per_s=float(data.get("tokens_per_s") or 0),
            price_per_hour=int(data.get("price_per_hour") or 0),
            price_per_million_tokens=int(data.get("price_per_million_tokens") or 0),
            eta_seconds=float(data.get("eta_seconds") or 0),
            total_cost=int(data.get("total_cost") or 0),
            throughput_source=dict(data.get("throughput_source") or {}),
            baseline=cls.from_dict(baseline) if baseline else None,
            speedup_vs_baseline=data.get("speedup_vs_baseline"),
            cost_ratio_vs_baseline=data.get("cost_ratio_vs_baseline"),
            chip_counts={slug: dict(modes) for slug, modes in (data.get("chip_counts") or {}).items()},
            overhead_seconds=float(data.get("overhead_seconds") or 0),
            uncertainty=data.get("uncertainty"),
            bridge=Bridge.from_dict(data["sync"], len(data.get("islands") or [])) if data.get("sync") else None,
            steps=int(data.get("steps") or 0),
        )


def _island(index: int, rank: Rank) -> dict:
    stack, _, simulated = rank.island.partition("-")
    return {
        "index": index,
        "island": rank.island,
        "stack": stack,
        "simulated": bool(simulated),
        "chips": {},
        "ranks": [],
        "batch": 0,
        "tokens_per_s": 0.0,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def catalog_chips() -> list[ChipInfo]:
    """The seed catalog's seven chip types at their launch prices (spot at the floor)."""
    return [
        ChipInfo(
            slug=spec["slug"],
            memory_gib=spec["memory_gib"],
            bf16_tflops=float(spec["bf16_tflops"]),
            default_mfu=float(spec["default_mfu"]),
            on_demand_per_hour=to_micros(spec["on_demand"]),
            spot_per_hour=to_micros(spec["spot_floor"]),
            stack=spec["software_stack"],
        )
        for spec in chip_specs()
    ]


class PlanningError(ValueError):
    """No plan can be made; the message names the problem and the numbers.

    Made with `of(template, **values)`, it keeps the message before its numbers went in (English with
    %(name)s placeholders) and the numbers: the platform shows it in the reader's language
    (workers.services.launch.refusal_of); the kernel itself stays English and free of Django.
    """

    def __init__(self, message: str, template: str = "", values: dict | None = None):
        super().__init__(message)
        self.template, self.values = template, dict(values or {})

    @classmethod
    def of(cls, template: str, **values) -> PlanningError:
        return cls(template % values, template, values)


class InvalidRequest(PlanningError):
    """The request itself is malformed (non-positive steps or batch, unknown policy, ...)."""


class ModelDoesNotFit(PlanningError):
    """Even fully sharded (ZeRO-3) across every chip allowed, a rank's memory exceeds its chip."""


class BudgetTooLow(PlanningError):
    """Plans exist, but none within the hourly (or total) budget."""


class NoCapacity(PlanningError):
    """No free chips, none of the asked types, or fewer than hand-picked counts ask for."""
