"""A finished run goes on (issue #31): a job trains llama-tiny to its end on the live platform, then
`POST /api/v1/jobs/{id}/continue/` makes a new job that real ranks resume from the old job's last checkpoint,
counting on from its step to the new total, and succeeds with a checkpoint of its own."""

from __future__ import annotations

import time

import pytest

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.accounts import token_client
from workers.models import JobMetric

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUN_TIMEOUT_S = 300
SPEC = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "per_device_batch_size": 2,
    "max_steps": 6,
    "max_budget": "28",
    "hyperparameters": {"checkpoint_every": 3, "lr_scheduler": "constant"},
}


def finished(job_id: int, stack) -> Job:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        job = Job.objects.get(pk=job_id)
        if job.status in JobStatus.finished():
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} is still {Job.objects.get(pk=job_id).status}\n{stack.logs()}")


def test_a_continued_job_resumes_from_the_old_jobs_checkpoint_and_counts_on(stack_with_agent, alice):
    api = token_client(alice)
    created = api.post("/api/v1/jobs/", SPEC, format="json")
    assert created.status_code == 201, created.json()
    first = finished(created.json()["id"], stack_with_agent)
    assert (first.status, first.step) == (JobStatus.SUCCEEDED, 6), stack_with_agent.logs()

    response = api.post(f"/api/v1/jobs/{first.pk}/continue/", {"additional_steps": 4}, format="json")
    assert response.status_code == 201, response.json()
    second = finished(response.json()["id"], stack_with_agent)
    assert second.status == JobStatus.SUCCEEDED, f"{second.status_reason}\n{stack_with_agent.logs()}"
    assert (second.continued_from_id, second.max_steps, second.step) == (first.pk, 10, 10)
    # Its ranks started at the old job's step 6: they reported steps 7 to 10 and no step before.
    steps = sorted(set(JobMetric.objects.filter(job=second).values_list("step", flat=True)))
    assert steps == [7, 8, 9, 10]
    assert second.latest_checkpoint and f"job-{second.pk}/" in second.latest_checkpoint
    assert response.json()["start_checkpoint_step"] == 6
