"""The platform's measured throughput history per model and chip type (feeds the planner)."""

from __future__ import annotations

from django.db.models import Avg

from workers.models import Allocation, Job, JobMetric, MeasuredThroughput

# Weight of a new run against the history (exponential moving average).
NEW_RUN_WEIGHT = 0.5


def remember_throughput(job: Job) -> None:
    """Fold the finished placement's per-chip tokens/s into the history."""
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
