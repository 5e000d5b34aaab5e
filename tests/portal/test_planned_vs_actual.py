"""The job page shows the quote against what the run does: speed, run time and cost, with how far off."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.lines import bill_as_charged
from tests.support.plans import hand_plan
from workers.models import JobMetric
from workers.services.allocations import release
from workers.services.placement import allocate


def planned_job(enroll, planning_job, fund, alice):
    fund(alice)  # placing holds a few minutes of the plan
    node, _ = enroll("a")
    job = planning_job(max_steps=100)
    plan = hand_plan(
        (node, 4), tokens_per_s=1000.0, eta_seconds=100.0, price_per_hour=3_600_000, total_cost=100_000, uncertainty=0.1
    )
    allocate(job, plan)
    return Job.objects.get(pk=job.pk)


def section(client, job) -> str:
    html = client.get(reverse("job", args=[job.pk])).content.decode()
    start = html.index('data-testid="planned-vs-actual"')
    return html[start : html.index("</table>", start)]


def test_a_finished_job_shows_quoted_against_actual_and_how_far_off(client, alice, fund, enroll, planning_job):
    job = planned_job(enroll, planning_job, fund, alice)
    placed = job.allocations.get().started_at
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED, step=100, tokens_per_s=800.0, finished_at=placed + timedelta(seconds=125)
    )
    job.allocations.update(ended_at=placed + timedelta(seconds=125))
    bill_as_charged(job.allocations.get(), 125_000)
    client.force_login(alice)

    shown = section(client, job)

    assert "quoted from what these nodes measured, ±10%" in shown
    assert "1,000" in shown and "800" in shown and "−20%" in shown.replace("-", "−")
    assert "1 min 40 s" in shown and "2 min 5 s" in shown and "+25%" in shown
    assert "¥0.100000" in shown or "¥0.10" in shown
    assert "+25%" in shown.split('data-testid="run-cost"')[1]


def test_a_running_job_projects_its_end_from_its_recent_steps(client, alice, fund, enroll, planning_job):
    job = planned_job(enroll, planning_job, fund, alice)
    placed = job.allocations.get().started_at
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, step=50, tokens_per_s=1000.0)
    for step in range(41, 51):
        JobMetric.objects.create(
            job=job, epoch=job.epoch, rank=0, step=step, loss=1.0, tokens_per_s=1000.0, step_time_s=1.0,
            chip_type="rtx-4090", created_at=placed + timedelta(seconds=step),
        )  # fmt: skip
    client.force_login(alice)

    shown = section(client, job)

    assert "Run time (projected)" in shown and "Cost (projected)" in shown
    assert 'data-testid="speed"' in shown and "+0%" in shown.split('data-testid="speed"')[1].split("</tr>")[0]


def test_a_replanned_job_is_still_compared_with_the_quote_it_launched_with(client, alice, fund, enroll, planning_job):
    job = planned_job(enroll, planning_job, fund, alice)  # quoted 1,000 tokens/s, 1 min 40 s
    elsewhere, _ = enroll("b")
    release(job, timezone.now())  # moved off its chips, then placed again on a slower plan
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PLANNING)
    replan = hand_plan((elsewhere, 4), tokens_per_s=500.0, eta_seconds=400.0, price_per_hour=3_600_000)
    allocate(Job.objects.get(pk=job.pk), replan)
    client.force_login(alice)

    shown = section(client, job)

    quoted = lambda testid: shown.split(f'data-testid="{testid}"')[1].split("</td>")[0]  # noqa: E731
    assert "1,000" in quoted("speed") and "1 min 40 s" in quoted("run-time")
    assert Job.objects.get(pk=job.pk).plan.tokens_per_s == 500.0
