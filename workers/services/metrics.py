"""What a job's charts and chip table show; shared by the job page and the API."""

from __future__ import annotations

from fleet.models import Job
from workers.models import JobMetric

METRIC_ROWS = 20_000


def latest_rank_metrics(job: Job) -> dict[int, JobMetric]:
    latest = JobMetric.objects.filter(job=job, epoch=job.epoch).order_by("rank", "-step").distinct("rank")
    return {metric.rank: metric for metric in latest}


def rank_table(job: Job) -> list[dict]:
    """Per rank: chip, node, micro-batch, planned and measured tokens/s."""
    latest = latest_rank_metrics(job)
    return [
        {
            "rank": index,
            "chip": rank.chip,
            "hostname": rank.hostname,
            "micro_batch": rank.micro_batch,
            "mode": rank.mode,
            "simulated": rank.simulated,
            "planned_tokens_per_s": rank.tokens_per_s,
            "measured_tokens_per_s": latest[index].tokens_per_s if index in latest else None,
        }
        for index, rank in enumerate(job.plan.ranks if job.plan else [])
    ]


def step_series(job: Job, since_step: int = 0) -> list[dict]:
    """Per step after `since_step`: the global loss and the job's tokens/s (the sum over ranks)."""
    rows = list(
        JobMetric.objects.filter(job=job, step__gt=since_step)
        .order_by("epoch", "step", "rank")
        .values("epoch", "step", "loss", "tokens_per_s")[:METRIC_ROWS]
    )
    if len(rows) == METRIC_ROWS:
        # The cut may fall inside a step; leave that step whole for the next request.
        last = (rows[-1]["epoch"], rows[-1]["step"])
        rows = [row for row in rows if (row["epoch"], row["step"]) != last]
    steps: dict[tuple[int, int], dict] = {}
    for row in rows:
        entry = steps.setdefault(
            (row["epoch"], row["step"]),
            {"step": row["step"], "epoch": row["epoch"], "loss": row["loss"], "tokens_per_s": 0.0},
        )
        entry["tokens_per_s"] += row["tokens_per_s"]
    return list(steps.values())


def eval_series(job: Job) -> list[dict]:
    """Every held-out loss measured so far (a few per job: sent whole each time)."""
    return list(job.evals.order_by("step").values("step", "eval_loss", "eval_tokens"))


def job_metrics(job: Job, since_step: int = 0) -> dict:
    return {"job": job.pk, "steps": step_series(job, since_step), "evals": eval_series(job), "ranks": rank_table(job)}
