"""How fast a chip trains a model, and how long a step's collectives take.

Step time of a mix (seconds), with micro-batch m_r and speed t_r (tokens/s) per rank:

    step = max_r(m_r * S / t_r) + comm(z, n, link)

comm moves bf16 gradients (2N bytes) over the slowest link of the job, without overlap:
ZeRO 0-2 all-reduce them (reduce-scatter + all-gather: 2(n-1)/n x 2N bytes); ZeRO-3 also
all-gathers the weights in forward and again in backward (3(n-1)/n x 2N bytes in all). A job
inside one pool gets the pool's fabric (400 Gbps); a job spanning pools gets the cross-pool
network (100 Gbps). One rank has nothing to exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kernel.modelspecs import ModelSpec
from kernel.planner.types import ChipInfo, NodeOffer

INTRA_POOL_GBPS = 400
CROSS_POOL_GBPS = 100
MEASURED, FLOPS_MODEL, MEASURED_ON_NODE = "measured", "flops-model", "measured-on-node"


@dataclass(frozen=True)
class NodeMeasure:
    """What one node delivered on this model: tokens/s per rank inside a whole job (waits for peers
    and collectives included; 0 when only other models ran there), seconds of start-up and
    finishing per job, and how much runs vary."""

    tokens_per_s: float
    overhead_s: float = 0.0
    spread: float = 0.0


@dataclass
class ThroughputModel:
    """Tokens/s per (model, chip): measured on the node when the platform has it, else measured on
    the chip type, else the FLOPs model.

    `measured` maps (model name, chip slug) to tokens/s per chip; `per_node` maps a node id to what
    that node delivered on the model being planned (the planner is asked about one model at a time).
    `simulation_scale` is the fleet-wide factor by which simulated nodes are paced
    (hosts/runtime/pacing.py); callers with other per-node differences override `node_multiplier`.
    """

    measured: Mapping[tuple[str, str], float] = field(default_factory=dict)
    simulation_scale: float = 1.0
    per_node: Mapping[str, NodeMeasure] = field(default_factory=dict)

    def tokens_per_s(self, model: ModelSpec, chip: ChipInfo) -> float:
        measured = self.measured.get((model.name, chip.slug))
        if measured:
            return float(measured)
        return chip.default_mfu * chip.bf16_tflops * 1e12 / model.training_flops_per_token

    def source(self, model: ModelSpec, chip: ChipInfo) -> str:
        return MEASURED if self.measured.get((model.name, chip.slug)) else FLOPS_MODEL

    def node_multiplier(self, node: NodeOffer) -> float:
        """Speed of this node relative to its chip type's figure."""
        return self.simulation_scale if node.simulated else 1.0

    def on_node(self, model: ModelSpec, chip: ChipInfo, node: NodeOffer) -> tuple[float, str, NodeMeasure | None]:
        """(tokens/s per rank, where that figure comes from, the node's measure if any) for a rank there."""
        measure = self.per_node.get(node.node_id)
        if measure is not None and measure.tokens_per_s > 0:
            return measure.tokens_per_s, MEASURED_ON_NODE, measure
        # A node measured only on other models: the modelled speed, with its start-up and finishing time.
        return self.tokens_per_s(model, chip) * self.node_multiplier(node), self.source(model, chip), measure


def link_gbps(cross_pool: bool) -> int:
    return CROSS_POOL_GBPS if cross_pool else INTRA_POOL_GBPS


def comm_seconds(params: int, stage: int, ranks: int, cross_pool: bool) -> float:
    """Seconds per step spent in collectives (formula in the module docstring)."""
    if ranks <= 1:
        return 0.0
    passes = 3 if stage == 3 else 2
    volume = passes * (ranks - 1) / ranks * 2 * params
    return volume * 8 / (link_gbps(cross_pool) * 1e9)
