"""The planner learns from what runs measured: throughput history per model and chip type."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import JobStatus
from kernel.spec import JobSpec
from tests.support.plans import hand_plan
from workers.models import JobMetric, MeasuredThroughput, NodeThroughput
from workers.services.placement import allocate
from workers.services.planning import quote, throughput_model
from workers.services.throughput import FIRST_RUN_SPREAD, remember_throughput

pytestmark = pytest.mark.django_db


def finished_job_with_metrics(enroll, planning_job, tokens_per_s: float, host: str = "a"):
    node, _ = enroll(host)
    job = planning_job(max_steps=10)
    allocate(job, hand_plan((node, 2)))
    for step in range(1, 11):
        JobMetric.objects.create(
            job=job,
            epoch=1,
            rank=0,
            step=step,
            loss=1.0,
            tokens_per_s=tokens_per_s,
            chip_type="rtx-4090",
            created_at=timezone.now(),
        )
    job.refresh_from_db()
    job.step, job.status = 10, JobStatus.SUCCEEDED
    return job


def test_a_finished_run_records_what_each_chip_type_measured(enroll, planning_job):
    job = finished_job_with_metrics(enroll, planning_job, 2500.0)
    remember_throughput(job)
    record = MeasuredThroughput.objects.get(model_name="llama-tiny", chip_type__slug="rtx-4090")
    assert record.simulated and record.tokens_per_s == pytest.approx(2500.0)


def test_the_planner_uses_the_measured_speed_scaled_back_to_the_real_chip(enroll, planning_job, settings):
    remember_throughput(finished_job_with_metrics(enroll, planning_job, 2500.0))
    model = throughput_model("llama-tiny")
    assert model.measured[("llama-tiny", "rtx-4090")] == pytest.approx(2500.0 * settings.SIMULATION_SLOWDOWN)


def test_history_is_a_moving_average_not_the_last_run(enroll, planning_job):
    first = finished_job_with_metrics(enroll, planning_job, 2000.0)
    remember_throughput(first)
    second = finished_job_with_metrics(enroll, planning_job, 3000.0, host="b")
    remember_throughput(second)
    record = MeasuredThroughput.objects.get(model_name="llama-tiny", chip_type__slug="rtx-4090")
    assert record.tokens_per_s == pytest.approx(2500.0) and record.samples == 2


def run_on(node, planning_job, tokens_per_s: float, started_s_before_first_step: float, finish_s: float):
    """A finished one-rank run on `node`: placed, first step after `started_s_before_first_step`,
    ten steps a second apart, done `finish_s` after the last."""
    job = planning_job(max_steps=10)
    allocate(job, hand_plan((node, 2)))
    placed = job.allocations.get().started_at
    first = placed + timedelta(seconds=started_s_before_first_step)
    for step in range(1, 11):
        JobMetric.objects.create(
            job=job, epoch=1, rank=0, step=step, loss=1.0, tokens_per_s=tokens_per_s, step_time_s=1.0,
            chip_type="rtx-4090", created_at=first + timedelta(seconds=step - 1),
        )  # fmt: skip
    done = first + timedelta(seconds=9 + finish_s)
    job.allocations.update(ended_at=done)
    job.refresh_from_db()
    job.step, job.status = 10, JobStatus.SUCCEEDED
    return job, done


def test_a_node_keeps_the_medians_of_its_recent_runs_so_one_odd_run_does_not_swing_it(enroll, planning_job):
    node, _ = enroll("a")
    for speed, start in [(1000.0, 10), (1000.0, 10), (200.0, 60), (1000.0, 10)]:  # one cold, slow run
        job, done = run_on(node, planning_job, speed, started_s_before_first_step=start, finish_s=0)
        remember_throughput(job, done)
    record = NodeThroughput.objects.get(node=node, model_name="llama-tiny")
    assert (record.tokens_per_s, record.overhead_s, len(record.recent)) == (1000.0, 9.0, 4)
    for _ in range(4):
        job, done = run_on(node, planning_job, 1000.0, started_s_before_first_step=10, finish_s=0)
        remember_throughput(job, done)
    record.refresh_from_db()
    assert len(record.recent) == 5 and record.spread == pytest.approx(0.0, abs=1e-9)  # the odd run has aged out


def test_a_finished_run_records_what_each_node_delivered_and_its_overhead(enroll, planning_job):
    node, _ = enroll("a")
    job, done = run_on(node, planning_job, 1200.0, started_s_before_first_step=14, finish_s=3)
    remember_throughput(job, done)
    record = NodeThroughput.objects.get(node=node, model_name="llama-tiny")
    assert record.tokens_per_s == pytest.approx(1200.0) and record.overhead_s == pytest.approx(16.0)  # 26 s - 10 steps
    assert record.samples == 1 and record.spread == FIRST_RUN_SPREAD

    job, done = run_on(node, planning_job, 800.0, started_s_before_first_step=10, finish_s=1)
    remember_throughput(job, done)
    record.refresh_from_db()
    assert record.tokens_per_s == pytest.approx(1000.0) and record.overhead_s == pytest.approx(13.0)
    # Medians of the two runs; the spread is how far they'd have been from each run (26 s and 20 s).
    assert record.spread == pytest.approx((1 / 26 + 1 / 20) / 2) and record.samples == 2


def test_a_quote_on_measured_nodes_uses_their_speed_and_overhead_and_states_its_uncertainty(enroll, planning_job):
    node, _ = enroll("a")
    spec = JobSpec(model_name="llama-tiny", per_device_batch_size=4, max_steps=100, max_budget_per_hour=28_000_000)
    modelled = quote(spec)
    assert modelled.uncertainty is None and modelled.overhead_seconds == 0  # no measurement yet

    job, done = run_on(node, planning_job, 100.0, started_s_before_first_step=20, finish_s=5)
    remember_throughput(job, done)
    measured = quote(spec)

    assert measured.throughput_source == {"rtx-4090": "measured-on-node"}
    assert measured.tokens_per_s == pytest.approx(100.0)
    assert measured.eta_seconds == pytest.approx(100 * measured.tokens_per_step / 100.0 + 24.0)
    assert measured.overhead_seconds == pytest.approx(24.0) and measured.uncertainty == pytest.approx(0.2)


def test_a_new_model_on_a_measured_node_is_quoted_with_its_start_up_but_says_it_is_unmeasured(enroll, planning_job):
    node, _ = enroll("a")
    job, done = run_on(node, planning_job, 100.0, started_s_before_first_step=20, finish_s=5)
    NodeThroughput.objects.all().delete()
    job.model_name = "llama-2-7b"  # the same node's only run was on another model
    remember_throughput(job, done)
    spec = JobSpec(model_name="llama-tiny", per_device_batch_size=4, max_steps=100, max_budget_per_hour=28_000_000)

    plan = quote(spec)

    assert plan.overhead_seconds == pytest.approx(24.0) and plan.uncertainty is None
    assert plan.throughput_source == {"rtx-4090": "flops-model"}
