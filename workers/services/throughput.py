"""The platform's measured throughput history per model, on each chip type and on each node (feeds the planner)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Avg, Max, Min
from django.utils import timezone

from workers.models import Allocation, Job, JobMetric, MeasuredThroughput, NodeThroughput
from workers.planner.throughput import NodeMeasure

# Weight of a new run against the history (exponential moving average).
NEW_RUN_WEIGHT = 0.5
# How much runs are assumed to vary before a node has two of them to compare.
FIRST_RUN_SPREAD = 0.1


def remember_throughput(job: Job, now: datetime | None = None) -> None:
    """Fold the finished placement's per-chip tokens/s into the history, and what each of its
    nodes delivered (per-rank speed, start-up and finishing seconds) into that node's."""
    remember_on_nodes(job, now or timezone.now())
    simulated_by_chip = {
        a.chip_type.slug: a.node.simulated
        for a in Allocation.objects.filter(job=job, epoch=job.epoch).select_related("chip_type", "node")
    }
    skip_warmup = max(1, job.step // 5)
    rows = (
        JobMetric.objects.filter(job=job, epoch=job.epoch, step__gt=skip_warmup)
        .values("chip_type")
        .annotate(tps=Avg("tokens_per_s"))
    )
    for row in rows:
        slug = row["chip_type"]
        if slug not in simulated_by_chip or not row["tps"]:
            continue
        record, created = MeasuredThroughput.objects.get_or_create(
            model_name=job.model_name,
            chip_type_id=_chip_id(job, slug),
            simulated=simulated_by_chip[slug],
            defaults={"tokens_per_s": row["tps"], "samples": 1},
        )
        if not created:
            record.tokens_per_s = (1 - NEW_RUN_WEIGHT) * record.tokens_per_s + NEW_RUN_WEIGHT * row["tps"]
            record.samples += 1
            record.save(update_fields=["tokens_per_s", "samples", "updated_at"])


def _chip_id(job: Job, slug: str) -> int:
    return Allocation.objects.filter(job=job, chip_type__slug=slug).values_list("chip_type_id", flat=True)[0]


def measured_history(model_name: str) -> dict[tuple[str, bool], float]:
    """{(chip slug, simulated): tokens/s per chip} for a model."""
    return {
        (row.chip_type.slug, row.simulated): row.tokens_per_s
        for row in MeasuredThroughput.objects.filter(model_name=model_name).select_related("chip_type")
    }


def remember_on_nodes(job: Job, now: datetime) -> None:
    """Per node of the finished placement: the steady per-rank tokens/s of its ranks, and the job's
    seconds outside steady steps (placement to first step, last step to done) as its overhead."""
    placement = Allocation.objects.filter(job=job, epoch=job.epoch)
    started = placement.aggregate(at=Min("started_at"))["at"]
    steps = JobMetric.objects.filter(job=job, epoch=job.epoch)
    span = steps.aggregate(first=Min("created_at"), last=Max("created_at"))
    if started is None or span["first"] is None or job.plan is None:
        return
    overhead = max((span["first"] - started).total_seconds(), 0) + max((now - span["last"]).total_seconds(), 0)
    skip_warmup = max(1, job.step // 5)
    per_rank = dict(
        steps.filter(step__gt=skip_warmup).values("rank").annotate(tps=Avg("tokens_per_s")).values_list("rank", "tps")
    )
    by_node: dict[int, list[float]] = defaultdict(list)
    for index, rank in enumerate(job.plan.ranks):
        if per_rank.get(index):
            by_node[rank.node_pk].append(per_rank[index])
    for node_id, speeds in by_node.items():
        _fold(node_id, job.model_name, sum(speeds) / len(speeds), overhead)


def _fold(node_id: int, model_name: str, tokens_per_s: float, overhead_s: float) -> None:
    record, created = NodeThroughput.objects.get_or_create(
        node_id=node_id,
        model_name=model_name,
        defaults={"tokens_per_s": tokens_per_s, "overhead_s": overhead_s, "spread": FIRST_RUN_SPREAD, "samples": 1},
    )
    if created:
        return
    deviation = abs(tokens_per_s - record.tokens_per_s) / record.tokens_per_s
    spread = deviation if record.samples == 1 else (1 - NEW_RUN_WEIGHT) * record.spread + NEW_RUN_WEIGHT * deviation
    record.spread = spread
    record.tokens_per_s = (1 - NEW_RUN_WEIGHT) * record.tokens_per_s + NEW_RUN_WEIGHT * tokens_per_s
    record.overhead_s = (1 - NEW_RUN_WEIGHT) * record.overhead_s + NEW_RUN_WEIGHT * overhead_s
    record.samples += 1
    record.save(update_fields=["tokens_per_s", "overhead_s", "spread", "samples", "updated_at"])


def measured_on_nodes(model_name: str) -> dict[str, NodeMeasure]:
    """{node id (as the planner names nodes): what it delivered on the model}."""
    return {
        str(row.node_id): NodeMeasure(row.tokens_per_s, row.overhead_s, row.spread)
        for row in NodeThroughput.objects.filter(model_name=model_name)
    }
