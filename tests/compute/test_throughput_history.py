"""The planner learns from what runs measured: throughput history per model and chip type."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.compute.conftest import hand_plan
from workers.choices import JobStatus
from workers.models import JobMetric, MeasuredThroughput
from workers.services.placement import allocate
from workers.services.planning import throughput_model
from workers.services.throughput import remember_throughput

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
