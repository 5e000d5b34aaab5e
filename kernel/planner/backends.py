"""One job, one torch.distributed backend: real chips and simulated ones never train together.

A real node's ranks train on CUDA and talk over NCCL; a simulated node's ranks train on the CPU and
talk over gloo. One process group can't span both, so a mix of the two would only fail at the
rendezvous. The planner plans each side on its own and keeps the better plan: `one_backend` wraps
the optimiser so every search (the policy's, the single-type baseline's, the diagnoses') stays on
one side, and the evaluator refuses a mixed count vector outright, so even an exhaustive search
or hand-picked counts can't produce one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kernel.planner.evaluate import Candidate, Evaluator
from kernel.planner.fleet import Kind

Optimiser = Callable[..., Candidate | None]
REAL, SIMULATED = "real", "simulated"
WHY = (
    "real and simulated chips never train in one job: simulated ranks run on the CPU with gloo, "
    "real ones on CUDA with NCCL"
)


def backend(kind: Kind) -> str:
    return SIMULATED if kind.simulated else REAL


def sides(kinds: Sequence[Kind]) -> list[list[int]]:
    """The kinds' indices grouped by backend, real first; only backends that have chips."""
    grouped: dict[str, list[int]] = {REAL: [], SIMULATED: []}
    for index, kind in enumerate(kinds):
        grouped[backend(kind)].append(index)
    return [indices for indices in grouped.values() if indices]


def one_backend(optimiser: Optimiser, kinds: Sequence[Kind]) -> Optimiser:
    """The optimiser run on each backend's kinds alone (within `allowed`), keeping the best by the key."""
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
