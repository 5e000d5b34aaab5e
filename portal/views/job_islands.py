"""The job page's islands: one row per island of a run across stacks, and how they keep in step."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Max
from django.utils.translation import gettext, gettext_lazy

from fleet.models import Job
from workers.models import JobMetric

STACK_NAMES = {"cuda": "CUDA", "cann": "CANN", "bang": "BANG", "xla": "XLA"}
# Where the plan's bridge figure came from (kernel/planner/islands.py); "": a plan from before it was said.
BRIDGE_SOURCES = {
    "measured": gettext_lazy("measured by island leaders"),
    "declared": gettext_lazy("as the operator declared it"),
    "default": gettext_lazy("assumed: none measured or declared"),
}


@dataclass(frozen=True)
class IslandRow:
    index: int
    stack: str  # "CUDA (simulated)"
    chips: str  # "2× rtx-4090"
    ranks: str  # "1–2"
    step: int  # the newest step its ranks reported
    syncs: int
    bytes_across: int
    taking_part: bool  # in the quorum at its last report
    bridge: str = ""  # "2.5 Gbit/s": what its leader measured across the bridge ("": nothing yet)


def island_rows(job: Job) -> list[IslandRow]:
    """Empty for a job of one island."""
    plan = job.plan
    if plan is None or plan.bridge is None:
        return []
    steps = dict(
        JobMetric.objects.filter(job=job, epoch=job.epoch)
        .values("rank")
        .annotate(step=Max("step"))
        .values_list("rank", "step")
    )
    stats = job.island_stats or {}
    members = _members(stats)
    rows = []
    for island in plan.islands():
        figures = stats.get(str(island["index"]), {})
        ranks = island["ranks"]
        rows.append(
            IslandRow(
                index=island["index"],
                stack=_stack_label(island),
                chips=", ".join(f"{count}× {slug}" for slug, count in sorted(island["chips"].items())),
                ranks=f"{ranks[0]}–{ranks[-1]}" if len(ranks) > 1 else str(ranks[0]),
                step=max((steps.get(rank, 0) for rank in ranks), default=0),
                syncs=figures.get("syncs", 0),
                bytes_across=figures.get("bytes_across", 0),
                taking_part=members is None or island["index"] in members,
                bridge=f"{figures['bridge_gbps']:.3g} Gbit/s" if figures.get("bridge_gbps") else "",
            )
        )
    return rows


def sync_summary(job: Job) -> dict | None:
    """How the islands keep in step, for the section's heading."""
    plan = job.plan
    if plan is None or plan.bridge is None:
        return None
    bridge = plan.bridge
    return {
        "mode": bridge.mode,
        "every": bridge.sync_every,
        "gbps": float(f"{bridge.gbps:.3g}"),
        "source": BRIDGE_SOURCES.get(bridge.source, ""),
        "exact": bridge.mode == "step",
    }


def _stack_label(island: dict) -> str:
    name = STACK_NAMES.get(island["stack"], island["stack"])
    return gettext("%(stack)s (simulated)") % {"stack": name} if island["simulated"] else name


def _members(stats: dict) -> set[int] | None:
    """Who took part at the newest report of any island (None: nothing reported yet)."""
    newest = max(stats.values(), key=lambda figures: figures.get("step", 0), default=None)
    return set(newest.get("members", [])) if newest else None
