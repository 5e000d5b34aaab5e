"""The platform's measured throughput history per model, on each chip type and on each node (feeds the planner)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from statistics import median

from django.db import transaction
from django.db.models import Avg, F, Max, Min
from django.utils import timezone

from fleet.models import Allocation, Job
from kernel.planner.throughput import NodeMeasure
from workers.models import JobMetric, MeasuredThroughput, NodeThroughput

# Weight of a new run against the history (exponential moving average).
NEW_RUN_WEIGHT = 0.5
# How much runs are assumed to vary before a node has two of them to compare.
FIRST_RUN_SPREAD = 0.1
# Runs per node and model whose medians make its figures.
RECENT_RUNS = 5


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
    """Per node of the finished placement, what a quote needs to reproduce this run: the per-rank
    speed in wall-clock time (a rank's tokens per step over the job's seconds per step between its
    first and last reported step, so checkpoints, waits for peers and a host's CPU limits are in
    it), and the rest of the run (start-up before the steps, finishing after) as overhead."""
    placement = Allocation.objects.filter(job=job, epoch=job.epoch)
    started = placement.aggregate(at=Min("started_at"))["at"]
    steps = JobMetric.objects.filter(job=job, epoch=job.epoch)
    span = steps.aggregate(first=Min("created_at"), last=Max("created_at"), low=Min("step"), high=Max("step"))
    if started is None or job.plan is None or span["high"] is None or span["high"] <= span["low"]:
        return
    seconds_per_step = (span["last"] - span["first"]).total_seconds() / (span["high"] - span["low"])
    run_s = (now - started).total_seconds()
    if seconds_per_step <= 0:
        return
    overhead = max(run_s - job.step * seconds_per_step, 0.0)
    tokens_per_step = dict(
        steps.values("rank").annotate(tokens=Avg(F("tokens_per_s") * F("step_time_s"))).values_list("rank", "tokens")
    )
    by_node: dict[int, list[float]] = defaultdict(list)
    for index, rank in enumerate(job.plan.ranks):
        if tokens_per_step.get(index):
            by_node[rank.node_pk].append(tokens_per_step[index] / seconds_per_step)
    for node_id, speeds in by_node.items():
        _fold(node_id, job.model_name, Run(sum(speeds) / len(speeds), overhead, run_s))


@dataclass(frozen=True)
class Run:
    """One finished run as a node saw it: per-rank tokens/s, seconds outside steady steps, and in all."""

    tokens_per_s: float
    overhead_s: float
    run_s: float

    def error(self, tokens_per_s: float, overhead_s: float) -> float:
        """How far an estimate from these figures would have been from this run, relative to it."""
        steady = max(self.run_s - self.overhead_s, 0.0)
        predicted = overhead_s + steady * self.tokens_per_s / tokens_per_s
        return abs(predicted - self.run_s) / self.run_s if self.run_s else 0.0


def _fold(node_id: int, model_name: str, run: Run) -> None:
    """Keep the node's last RECENT_RUNS runs on the model; its figures are their medians (one cold or
    disturbed run does not swing the next quote), its spread how far those medians are from each run."""
    with transaction.atomic():
        record = NodeThroughput.objects.select_for_update().filter(node_id=node_id, model_name=model_name).first()
        _add_run(record or NodeThroughput(node_id=node_id, model_name=model_name, recent=[]), run)


def _add_run(record: NodeThroughput, run: Run) -> None:
    runs = [Run(*values) for values in record.recent][-(RECENT_RUNS - 1) :] + [run]
    record.recent = [[r.tokens_per_s, r.overhead_s, r.run_s] for r in runs]
    record.tokens_per_s = median(r.tokens_per_s for r in runs)
    record.overhead_s = median(r.overhead_s for r in runs)
    errors = [r.error(record.tokens_per_s, record.overhead_s) for r in runs]
    record.spread = FIRST_RUN_SPREAD if len(runs) == 1 else sum(errors) / len(errors)
    record.samples += 1
    record.save()


def measured_on_nodes(model_name: str) -> dict[str, NodeMeasure]:
    """{node id (as the planner names nodes): what it delivered on the model}; a node that ran only
    other models gives its start-up and finishing time (the median over them) and no speed."""
    measures: dict[str, NodeMeasure] = {}
    overheads: dict[str, list[float]] = defaultdict(list)
    for row in NodeThroughput.objects.only("node_id", "model_name", "tokens_per_s", "overhead_s", "spread"):
        node = str(row.node_id)
        if row.model_name == model_name:
            measures[node] = NodeMeasure(row.tokens_per_s, row.overhead_s, row.spread)
        else:
            overheads[node].append(row.overhead_s)
    for node, values in overheads.items():
        measures.setdefault(node, NodeMeasure(0.0, median(values)))
    return measures
