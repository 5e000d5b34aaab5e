"""What an island's leader reports: the job's per-island figures and the timeline's joins and leaves.

Every report updates `Job.island_stats[island]` (the job page's islands table): its stack and mode,
syncs done, bytes sent across the bridge, who took part at its last sync. A change of who takes part
(an island joined, the others went on without one, a step dropped because one left mid-sync) is
also a timeline event. Diloco's routine syncs only move the figures.

A leader's report that sent something also carries `bridge_gbps`, the bridge it measured (its
allreduces' effective throughput since its last report): it is kept in the island's figures, and in
the reporting node's BridgeMeasurement, where the planner reads it (workers/services/planning.py).
"""

from __future__ import annotations

from statistics import median

from django.db import transaction
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from fleet.choices import JobEventKind
from fleet.models import Job, Node
from workers.models import BridgeMeasurement
from workers.services.events import record_event

TIMELINE_CHANGES = ("joined", "members", "dropped")
RECENT_BRIDGE_REPORTS = 9  # a node's measured bridge: the median of its last this many reports


def record_island(job: Job, item: dict, now, node: Node | None = None) -> None:
    """`node`: where the reporting rank runs (accept_report checked it); a measured bridge is kept on it."""
    island = str(item["island"])
    stats = dict(job.island_stats or {})
    before = stats.get(island, {})
    stats[island] = {
        "stack": item.get("stack", before.get("stack", "")),
        "mode": item.get("mode", before.get("mode", "")),
        "syncs": max(item.get("syncs", 0), before.get("syncs", 0)),
        "bytes_across": max(item.get("bytes_across", 0), before.get("bytes_across", 0)),
        "members": item.get("members", before.get("members", [])),
        "step": item.get("step", before.get("step", 0)),
        "change": item["change"],
        # What its last outer sync (diloco) holds: the work up to the step that round was sent at (an
        # overlapped round lands H steps later); what a leave loses is the work after it.
        "synced_step": item.get("round_step", item.get("step", 0))
        if item["change"] == "sync"
        else before.get("synced_step", 0),
        **{key: before[key] for key in ("left", "left_reason") if key in before},
    }
    gbps = item.get("bridge_gbps") or before.get("bridge_gbps")  # the newest measured, else the last one
    if gbps:
        stats[island]["bridge_gbps"] = gbps
    job.island_stats = stats
    job.save(update_fields=["island_stats", "updated_at"])
    if item["change"] in TIMELINE_CHANGES:
        record_event(job, JobEventKind.ISLAND, describe_text(item), data=_data(item), now=now)
    if node is not None and item.get("bridge_gbps"):
        remember_bridge(node, float(item["bridge_gbps"]))


def remember_bridge(node: Node, gbps: float) -> BridgeMeasurement:
    """Fold one report's measured Gbit/s into the node's bridge: the median of its recent reports."""
    with transaction.atomic():
        measure, _ = BridgeMeasurement.objects.select_for_update().get_or_create(node=node, defaults={"gbps": gbps})
        measure.recent = [*measure.recent, gbps][-RECENT_BRIDGE_REPORTS:]
        measure.gbps = float(f"{median(measure.recent):.6g}")
        measure.samples += 1
        measure.save()
    return measure


def measured_bridges() -> dict[int, float]:
    """{node id: its measured bridge Gbit/s} for every node that has measured one."""
    return dict(BridgeMeasurement.objects.values_list("node_id", "gbps"))


def describe(item: dict) -> str:
    """ "Island 2 (cann) joined at step 8, healed from a healthy island" and the like."""
    return describe_text(item).english()


def describe_text(item: dict) -> StoredText:
    """`describe`, stored so the timeline shows it in the reader's language."""
    island, step = item["island"], item.get("step", 0)
    stack = f" ({item['stack']})" if item.get("stack") else ""
    members = ", ".join(str(member) for member in item.get("members", []))
    if item["change"] == "joined":
        joined = gettext_noop(
            "Island %(island)s%(stack)s joined at step %(step)s, with the live state of a healthy island"
        )
        return StoredText(joined, island=island, stack=stack, step=step)
    if item["change"] == "dropped":
        dropped = gettext_noop(
            "Island %(island)s%(stack)s dropped step %(step)s: an island left mid-sync; the step is trained again"
        )
        return StoredText(dropped, island=island, stack=stack, step=step + 1)
    together = gettext_noop("Islands training together from step %(step)s: %(members)s")
    return StoredText(together, step=step, members=members or StoredText(gettext_noop("none")))


def _data(item: dict) -> dict:
    keys = ("island", "change", "step", "members", "syncs", "bytes_across", "bridge_gbps", "stack", "mode")
    return {key: item[key] for key in keys if key in item}
