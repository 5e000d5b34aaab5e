"""The planner's inputs and outputs: plain dataclasses, money in integer micro-units per chip-hour.

Nothing here imports Django: the API layer turns models into these and `Plan.to_dict()` back
into JSON, so the planner can be tested and benchmarked without a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from base.money import to_micros
from workers.modelspecs import ModelSpec

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


@dataclass(frozen=True)
class NodeOffer:
    """Free chips on one node, as the scheduler sees them at planning time."""

    node_id: str
    hostname: str
    chip: str
    free_chips: int
    spot_eligible: bool = False
    pool: str = ""
    zone: str = ""
    simulated: bool = False

    def __post_init__(self) -> None:
        if not self.pool:  # pool = chips of one type in one zone; links inside a pool are fast
            object.__setattr__(self, "pool", f"{self.chip}@{self.zone}")


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


@dataclass(frozen=True)
class Rank:
    """One training process on one chip."""

    chip: str
    node_id: str
    hostname: str
    pool: str
    micro_batch: int
    mode: str
    tokens_per_s: float
    memory_gib: float
    simulated: bool

    def to_dict(self) -> dict:
        return {
            "chip": self.chip,
            "node_id": self.node_id,
            "hostname": self.hostname,
            "pool": self.pool,
            "micro_batch": self.micro_batch,
            "mode": self.mode,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "memory_gib": round(self.memory_gib, 2),
            "simulated": self.simulated,
        }


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

    @property
    def world_size(self) -> int:
        return len(self.ranks)

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
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def catalog_chips() -> list[ChipInfo]:
    """The seed catalog's seven chip types at their launch prices (spot at the floor)."""
    from workers.catalog import chip_specs

    return [
        ChipInfo(
            slug=spec["slug"],
            memory_gib=spec["memory_gib"],
            bf16_tflops=float(spec["bf16_tflops"]),
            default_mfu=float(spec["default_mfu"]),
            on_demand_per_hour=to_micros(spec["on_demand"]),
            spot_per_hour=to_micros(spec["spot_floor"]),
        )
        for spec in chip_specs()
    ]


class PlanningError(ValueError):
    """No plan can be made; the message names the problem and the numbers."""


class InvalidRequest(PlanningError):
    """The request itself is malformed (non-positive steps or batch, unknown policy, ...)."""


class ModelDoesNotFit(PlanningError):
    """Even fully sharded (ZeRO-3) across every chip allowed, a rank's memory exceeds its chip."""


class BudgetTooLow(PlanningError):
    """Plans exist, but none within the hourly (or total) budget."""


class NoCapacity(PlanningError):
    """No free chips, none of the asked types, or fewer than hand-picked counts ask for."""
