"""The cost-performance planner: which chips, how many, what micro-batch each, at what price.

Pure Python (no Django, no torch), so the API, the scheduler, tests and `bench/planner.py` call
it directly. Formulas in `memory`, `throughput` and `evaluate`; where it sits in the platform:
docs/ARCHITECTURE.md, sections 1 and 5.
"""

from kernel.planner.evaluate import objective_value
from kernel.planner.memory import (
    activation_bytes_per_sample,
    fits_chip,
    lowest_fitting_stage,
    micro_batch_cap,
    model_state_bytes,
    rank_bytes,
)
from kernel.planner.quote import exhaustive_plan, plan, validate
from kernel.planner.split import split_micro_batches
from kernel.planner.throughput import ThroughputModel, comm_seconds
from kernel.planner.types import (
    DEFAULT_MAX_RANKS,
    POLICIES,
    BudgetTooLow,
    ChipInfo,
    InvalidRequest,
    ModelDoesNotFit,
    NoCapacity,
    NodeOffer,
    Plan,
    PlanningError,
    PlanRequest,
    Rank,
    catalog_chips,
)

__all__ = [
    "DEFAULT_MAX_RANKS",
    "POLICIES",
    "BudgetTooLow",
    "ChipInfo",
    "InvalidRequest",
    "ModelDoesNotFit",
    "NoCapacity",
    "NodeOffer",
    "Plan",
    "PlanRequest",
    "PlanningError",
    "Rank",
    "ThroughputModel",
    "activation_bytes_per_sample",
    "catalog_chips",
    "comm_seconds",
    "exhaustive_plan",
    "fits_chip",
    "lowest_fitting_stage",
    "micro_batch_cap",
    "model_state_bytes",
    "objective_value",
    "plan",
    "rank_bytes",
    "split_micro_batches",
    "validate",
]
