"""Islands in a plan: its ranks grouped by software stack, and the bridge that keeps them in step.

A rank's island is its chip's stack (kernel/stacks.py), simulated chips apart from real ones. Inside
an island the ranks are one DeepSpeed world on the stack's own library; between islands only the
islands' leaders talk, over TCP (torchft, hosts/runtime/islands/), at the bridge's bandwidth
(`link_of`): per pool, the slowest its nodes measured (an island leader's allreduces across the
bridge, their effective Gbit/s) or else the slowest it declares; the slowest of the plan's pools;
else `DEFAULT_BRIDGE_GBPS`. The bridge's `source` says which ("measured", "declared", "default").

Each sync, every leader sends its whole gradient (`step` mode) or parameter delta (`diloco`) in
float32 through a ring allreduce: 2(n-1)/n of it for n islands. The planner picks `step` while that
costs at most STEP_SHARE of a step (the run is then one flat world), else `diloco` with H inner
steps between syncs, the fewest that bring the bridge under DILOCO_SHARE of the H steps' time. A
job may name the mode and H itself. A step waits for a step-mode sync; a diloco sync crosses during
the next H steps, and only what they can't hide is added to the step (`Bridge.exposed_per_step`).

Without islands (PlanRequest.islands False: no Lighthouse on this platform), a plan stays on one
backend as before: real and simulated chips never train together (`one_backend`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel.protocol import SYNC_DILOCO, SYNC_STEP
from kernel.words import Words

if TYPE_CHECKING:
    from kernel.planner.evaluate import Candidate, Evaluator
    from kernel.planner.fleet import Kind
    from kernel.planner.types import NodeOffer
STEP_SHARE = 0.05  # step mode while the bridge adds at most 5% to a step: 0.95 of the islands' speed
DILOCO_SHARE = 0.10  # diloco: the fewest inner steps that keep the bridge under 10% of their time
MAX_SYNC_EVERY = 500
DEFAULT_BRIDGE_GBPS = 1.0  # between pools that declare nothing: a modest inter-site link
BYTES_PER_VALUE = 4  # float32 across the bridge
MEASURED, DECLARED, DEFAULT = "measured", "declared", "default"  # where a bridge's Gbit/s came from
WHY = Words(
    "real and simulated chips never train in one job without islands: simulated ranks run on the CPU with "
    "gloo, real ones on CUDA with NCCL"
)


@dataclass(frozen=True)
class Bridge:
    """How a plan's islands keep in step, and what it costs."""

    islands: int
    mode: str
    sync_every: int
    gbps: float
    bytes_per_sync: int  # what each island's leader sends across per sync
    seconds_per_sync: float
    source: str = ""  # where `gbps` came from: MEASURED, DECLARED or DEFAULT ("": a plan from before it was said)

    @property
    def bytes_per_step(self) -> float:
        return self.bytes_per_sync / self.sync_every

    @property
    def seconds_per_step(self) -> float:
        return self.seconds_per_sync / self.sync_every

    def exposed_per_step(self, step_seconds: float) -> float:
        """What the bridge adds to each step of islands that take `step_seconds` a step on their own. A step-mode
        sync is waited for every step. A diloco sync crosses while the islands train their next H steps
        (hosts/runtime/islands/trainer.py), so only what those steps can't hide is waited for."""
        if self.mode == SYNC_DILOCO:
            return max(self.seconds_per_sync - self.sync_every * step_seconds, 0.0) / self.sync_every
        return self.seconds_per_step

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "sync_every": self.sync_every,
            "bridge_gbps": self.gbps,
            "bridge_source": self.source,
            "bytes_per_sync": self.bytes_per_sync,
            "bytes_per_step": round(self.bytes_per_step),
            "seconds_per_sync": round(self.seconds_per_sync, 6),
            "exact": self.mode == SYNC_STEP,
            # diloco's syncs cross while the islands train their next round (hosts/runtime/islands/trainer.py)
            "overlapped": self.mode == SYNC_DILOCO,
        }

    @classmethod
    def from_dict(cls, data: dict, islands: int) -> Bridge:
        return cls(
            islands=islands,
            mode=data["mode"],
            sync_every=int(data["sync_every"]),
            gbps=float(data["bridge_gbps"]),
            bytes_per_sync=int(data["bytes_per_sync"]),
            seconds_per_sync=float(data["seconds_per_sync"]),
            source=str(data.get("bridge_source") or ""),
        )


def bridge_for(
    islands: int,
    trainable_parameters: int,
    step_seconds: float,
    gbps: float,
    mode: str | None = None,
    sync_every: int | None = None,
    source: str = "",
) -> Bridge:
    """The bridge of `islands` islands training a model with that many trainable parameters, at `gbps`
    (which came from `source`)."""
    bytes_per_sync = int(BYTES_PER_VALUE * trainable_parameters * 2 * (islands - 1) / islands)
    seconds = bytes_per_sync * 8 / (gbps * 1e9)
    if mode is None:
        mode = SYNC_STEP if seconds <= STEP_SHARE * step_seconds else SYNC_DILOCO
    if mode == SYNC_STEP:
        every = 1
    elif sync_every:
        every = sync_every
    else:
        every = min(max(math.ceil(seconds / (DILOCO_SHARE * max(step_seconds, 1e-9))), 2), MAX_SYNC_EVERY)
    return Bridge(islands, mode, every, gbps, bytes_per_sync, seconds, source)


def link_of(offers: Iterable[NodeOffer]) -> tuple[float, str]:
    """The slowest bridge these nodes have, and where it came from: per pool, the slowest its nodes
    measured, else the slowest it declares; then the slowest pool. (0.0, "") when none says anything."""
    measured: dict[str, float] = {}
    declared: dict[str, float] = {}
    for offer in offers:
        if offer.bridge_gbps > 0:
            pools = measured if offer.bridge_measured else declared
            pools[offer.pool] = min(offer.bridge_gbps, pools.get(offer.pool, math.inf))
    links = [(gbps, MEASURED) for gbps in measured.values()]
    links += [(gbps, DECLARED) for pool, gbps in declared.items() if pool not in measured]
    return slowest(links)


def slowest(links: Iterable[tuple[float, str]]) -> tuple[float, str]:
    """The slowest (Gbit/s, source) of `links` (a measured one on a tie); (0.0, "") when there are none."""
    return min(links, key=lambda link: (link[0], link[1] != MEASURED), default=(0.0, ""))


def sides(kinds: Sequence[Kind], islands: bool = False) -> list[list[int]]:
    """The sets of kinds a plan may mix: all of them with islands; without, the kinds' indices grouped by
    backend, real first (only backends that have chips)."""
    if islands:
        return [list(range(len(kinds)))] if kinds else []
    grouped: dict[bool, list[int]] = {False: [], True: []}
    for index, kind in enumerate(kinds):
        grouped[kind.simulated].append(index)
    return [indices for indices in grouped.values() if indices]


def backend(kind: Kind) -> str:
    return "simulated" if kind.simulated else "real"


def one_backend(optimiser, kinds: Sequence[Kind]):
    """Without islands: the optimiser run on each backend's kinds alone (within `allowed`), keeping the best."""
    groups = sides(kinds)
    if len(groups) < 2:
        return optimiser

    def search(ev: Evaluator, key, allowed: Sequence[int] | None = None) -> Candidate | None:
        best = None
        for group in groups:
            subset = group if allowed is None else [i for i in group if i in set(allowed)]
            candidate = optimiser(ev, key, subset) if subset else None
            if candidate is not None and (best is None or key(candidate) < key(best)):
                best = candidate
        return best

    return search
