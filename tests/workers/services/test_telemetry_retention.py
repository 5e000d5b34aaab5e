"""Job log lines and metrics are deleted once their job ended longer ago than the operator's retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from billing.models import OperatorSettings
from fleet.choices import JobStatus
from fleet.models import Job
from portal.celery import app as celery_app
from workers.models import JobEvent, JobLogLine, JobMetric
from workers.services.retention import prune_job_telemetry

pytestmark = pytest.mark.django_db


def job_with_telemetry(owner, *, ended_days_ago: float | None, rows: int = 3) -> Job:
    """A job with `rows` log lines and metrics; finished `ended_days_ago` days ago, or still running (None)."""
    now = timezone.now()
    ended = ended_days_ago is not None
    job = Job.objects.create(
        owner=owner,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=10**7,
        status=JobStatus.SUCCEEDED if ended else JobStatus.RUNNING,
        epoch=1,
        finished_at=now - timedelta(days=ended_days_ago) if ended else None,
    )
    long_ago = now - timedelta(days=400)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, epoch=1, rank=0, line=f"step {n}", created_at=long_ago) for n in range(rows)
    )
    JobMetric.objects.bulk_create(
        JobMetric(job=job, epoch=1, rank=0, step=n, loss=1.0, tokens_per_s=10.0, created_at=long_ago)
        for n in range(rows)
    )
    JobEvent.objects.create(job=job, kind="succeeded" if ended else "running", created_at=long_ago)
    return job


def telemetry(job: Job) -> tuple[int, int]:
    return JobLogLine.objects.filter(job=job).count(), JobMetric.objects.filter(job=job).count()


def retention_days(days: int) -> None:
    OperatorSettings.objects.update_or_create(pk=1, defaults={"telemetry_retention_days": days})


def test_the_retention_has_a_default_of_ninety_days():
    assert OperatorSettings.load().telemetry_retention_days == 90


def test_logs_and_metrics_of_a_job_that_ended_before_the_retention_are_deleted_and_the_job_kept(alice):
    retention_days(30)
    old = job_with_telemetry(alice, ended_days_ago=31)
    recent = job_with_telemetry(alice, ended_days_ago=29)

    pruned = prune_job_telemetry()

    assert pruned == {"log_lines": 3, "metrics": 3}
    assert telemetry(old) == (0, 0)
    assert telemetry(recent) == (3, 3)
    assert Job.objects.get(pk=old.pk).status == JobStatus.SUCCEEDED
    assert JobEvent.objects.filter(job=old).count() == 1  # the timeline stays


def test_a_running_job_keeps_its_old_rows_whatever_their_age(alice):
    retention_days(1)
    running = job_with_telemetry(alice, ended_days_ago=None)
    assert prune_job_telemetry() == {"log_lines": 0, "metrics": 0}
    assert telemetry(running) == (3, 3)


def test_rows_are_deleted_in_batches_until_none_is_left(alice):
    retention_days(30)
    old = job_with_telemetry(alice, ended_days_ago=40, rows=7)
    assert prune_job_telemetry(batch=2) == {"log_lines": 7, "metrics": 7}
    assert telemetry(old) == (0, 0)
    assert prune_job_telemetry(batch=2) == {"log_lines": 0, "metrics": 0}  # a second pass has nothing to do


def test_a_longer_retention_set_by_the_operator_keeps_the_rows(alice):
    retention_days(365)
    kept = job_with_telemetry(alice, ended_days_ago=100)
    prune_job_telemetry()
    assert telemetry(kept) == (3, 3)


def test_the_operator_sets_the_retention_in_the_admin(client, operator):
    client.force_login(operator)
    OperatorSettings.load()
    page = client.get("/admin/billing/operatorsettings/1/change/")
    assert page.status_code == 200 and b"telemetry_retention_days" in page.content
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: value for name, value in data.items() if value is not None}
    answer = client.post(
        "/admin/billing/operatorsettings/1/change/", {**data, "telemetry_retention_days": "0"}, follow=True
    )
    assert b"Ensure this value is greater than or equal to 1" in answer.content
    client.post("/admin/billing/operatorsettings/1/change/", {**data, "telemetry_retention_days": "14"})
    assert OperatorSettings.load().telemetry_retention_days == 14


def test_pruning_runs_on_the_beat():
    entry = settings.CELERY_BEAT_SCHEDULE["prune-job-telemetry"]
    assert entry["task"] == "workers.tasks.prune_job_telemetry" and entry["schedule"] > 0
    celery_app.loader.import_default_modules()
    assert "workers.tasks.prune_job_telemetry" in celery_app.tasks
