"""Fixtures of the portal's page tests: no scheduling behind a launch, a store of the test's own, and alice
signed in with credit."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from tests.support.portal_pages import PLAN, make_job
from tests.support.stored import own_store_url
from workers.models import JobLogLine, JobMetric
from workers.services.events import record_event


@pytest.fixture
def no_scheduling(monkeypatch):
    """A launch queues its job without the scheduler placing it."""
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)


@pytest.fixture
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def alice_client(client, alice, fund):
    """Alice signed in, with the credit a launch needs to hold a few minutes of its plan."""
    fund(alice)
    client.force_login(alice)
    return client


@pytest.fixture
def running_job(alice, catalog) -> Job:
    now = timezone.now()
    job = make_job(
        alice,
        name="mixed run",
        status=JobStatus.RUNNING,
        plan=PLAN,
        epoch=1,
        step=50,
        loss=2.5,
        first_loss=6.2,
        tokens_per_s=1_024.0,
        started_at=now,
    )
    record_event(job, JobEventKind.PLACED, "Placed on 1 × rtx-4090 + 1 × tpu-v5e")
    for step in (49, 50):
        for index, speed in enumerate((400.0, 624.0)):
            JobMetric.objects.create(
                job=job, epoch=1, rank=index, step=step, loss=2.5, tokens_per_s=speed, created_at=now
            )
    JobLogLine.objects.create(job=job, epoch=1, rank=1, line="step 50 loss 2.5000", created_at=now)
    return job
