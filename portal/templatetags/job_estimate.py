"""Planned against actual on the job page: `{% load job_estimate %}{% planned_vs_actual job %}`.

The quote's speed, run time and cost beside what the run has done so far, projected to its end
from its recent steps, so a user sees at once whether the quote holds. The quote is the one given at
launch (`Job.quote`), kept when the job is re-planned after a move; the rest of the run is projected
at the current placement's price.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django import template
from django.db.models import Min
from django.utils import timezone
from django.utils.translation import gettext

from base.formatting import format_duration
from billing.services.statements import job_charged
from fleet.models import Allocation, Job
from kernel.money import cost_over, format_estimate
from kernel.spec import start_step_of
from workers.models import JobMetric

register = template.Library()

RECENT_STEPS = 10


@dataclass(frozen=True)
class Line:
    label: str
    planned: str
    actual: str
    off_by: float | None  # (actual - planned) / planned; None before there is anything to compare
    testid: str

    @property
    def deviation(self) -> str:
        return "" if self.off_by is None else f"{self.off_by:+.0%}"

    def beyond(self, uncertainty: float | None) -> bool:
        return self.off_by is not None and abs(self.off_by) > (uncertainty or 0.15)


@register.filter
def start_step(job: Job) -> int:
    """A continuation's start checkpoint's step (`Continued from job N (step S)`)."""
    return start_step_of(job.start_checkpoint)


@register.inclusion_tag("partials/training/job_estimate.html")
def planned_vs_actual(job: Job) -> dict:
    plan, quoted = job.plan, job.quote or job.plan
    if plan is None or not quoted.eta_seconds:
        return {"lines": []}
    allocations = Allocation.objects.filter(job=job)
    started, charged = allocations.aggregate(started=Min("started_at"))["started"], job_charged(job)
    if started is None:
        return {"lines": []}
    elapsed = ((job.finished_at or timezone.now()) - started).total_seconds()
    remaining = 0.0 if job.finished_at else _remaining_seconds(job)
    run_time = None if remaining is None else elapsed + remaining
    cost = None if remaining is None else charged + cost_over(plan.price_per_hour, timedelta(seconds=remaining))
    speed = job.tokens_per_s
    ended = job.finished_at is not None
    lines = [
        Line(
            gettext("Tokens/s"),
            f"{quoted.tokens_per_s:,.0f}",
            f"{speed:,.0f}" if speed else "—",
            _off(speed, quoted.tokens_per_s),
            "speed",
        ),
        Line(
            gettext("Run time") if ended else gettext("Run time (projected)"),
            format_duration(quoted.eta_seconds),
            format_duration(run_time),
            _off(run_time, quoted.eta_seconds),
            "run-time",
        ),
        Line(
            gettext("Cost") if ended else gettext("Cost (projected)"),
            format_estimate(quoted.total_cost),
            format_estimate(cost) if cost is not None else "—",
            _off(cost, quoted.total_cost),
            "run-cost",
        ),
    ]
    if quoted.uncertainty is not None:
        basis = gettext("quoted from what these nodes measured, ±%(uncertainty)s") % {
            "uncertainty": f"{quoted.uncertainty:.0%}"
        }
    else:
        basis = gettext("quoted from the chips' modelled speed: no measurements yet")
    return {"lines": lines, "basis": basis}


def _remaining_seconds(job: Job) -> float | None:
    """Steps left × the mean of rank 0's recent step times; None before a step was reported."""
    recent = JobMetric.objects.filter(job=job, epoch=job.epoch, rank=0).order_by("-step")[:RECENT_STEPS]
    times = [metric.step_time_s for metric in recent if metric.step_time_s]
    if not times:
        return None
    return max(job.max_steps - job.step, 0) * sum(times) / len(times)


def _off(actual: float | None, planned: float | None) -> float | None:
    if not actual or not planned:
        return None
    return (actual - planned) / planned
