"""A job whose ranks train their last step while a notice is on its way has nothing left to move.

Found under load (#28, tests/system/runs/test_models_run.py): a maintenance notice reached the ranks after
their last step; they had saved the final model and exited, and the platform still moved the job.
It was placed again from the final checkpoint, its new ranks had no step to train and exited, and
the job ended succeeded with its move "abandoned" and a placement billed for nothing. Now the move
closes as "finished" and the job succeeds at once. The reports are played by hand, in the order the
agents sent them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import JobStatus, MigrationReason
from fleet.models import Allocation, Job
from tests.support.plans import hand_plan
from workers.services.lifecycle import reclaim
from workers.services.monitor import reconcile
from workers.services.placement import allocate
from workers.services.reports import accept_report

pytestmark = pytest.mark.django_db

LAST = 12


def report(job: Job, node, *items: dict) -> None:
    job.refresh_from_db()
    accept_report(node, job.pk, job.epoch, list(items))


def metric(step: int) -> dict:
    return {"kind": "metric", "rank": 0, "step": step, "loss": 3.0 - step / 10, "tokens_per_s": 100.0}


def checkpoint(job: Job, step: int, stopping: bool = False) -> dict:
    path = f"store:checkpoints/job-{job.pk}/step-{step}"
    return {"kind": "checkpoint", "rank": 0, "step": step, "path": path, "seconds": 0.1, "stopping": stopping}


EXIT = {"kind": "exit", "rank": 0, "code": 0}


@pytest.fixture
def noticed_job(enroll, planning_job):
    """A one-rank job at step 5 of 12, given a maintenance notice; returns (job, node)."""
    node, _ = enroll("maintained")
    job = planning_job(max_steps=LAST)
    allocate(job, hand_plan((node, 4)))
    report(job, node, metric(1), metric(5))
    assert reclaim(job.pk, MigrationReason.MAINTENANCE, "test maintenance", nodes=[node], notice_seconds=30)
    return job, node


def assert_succeeded_where_it_was(job: Job, placed_epoch: int) -> None:
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.status_reason
    assert job.epoch == placed_epoch  # never placed again
    assert Allocation.objects.filter(job=job).count() == 1
    move = job.migrations.get()
    assert (move.status, move.checkpoint_step, move.resumed_at) == ("finished", LAST, None)
    assert job.events.filter(kind="succeeded").count() == 1


def test_ranks_that_trained_their_last_step_before_the_notice_reached_them_end_the_job_succeeded(
    noticed_job, no_celery, django_capture_on_commit_callbacks
):
    job, node = noticed_job
    epoch = job.epoch
    with django_capture_on_commit_callbacks(execute=True):
        report(job, node, *(metric(step) for step in range(6, LAST + 1)), checkpoint(job, LAST))
        report(job, node, EXIT)
    assert_succeeded_where_it_was(job, epoch)
    assert "before it had to move" in job.status_reason


def test_a_notice_checkpoint_taken_at_the_last_step_ends_the_job_succeeded(
    noticed_job, no_celery, django_capture_on_commit_callbacks
):
    """The notice reached rank 0 exactly at the last step: its checkpoint is the notice's and the final model."""
    job, node = noticed_job
    epoch = job.epoch
    with django_capture_on_commit_callbacks(execute=True):
        report(job, node, *(metric(step) for step in range(6, LAST + 1)), checkpoint(job, LAST, stopping=True))
    assert_succeeded_where_it_was(job, epoch)
    with django_capture_on_commit_callbacks(execute=True):
        report(job, node, EXIT)  # the ranks leave afterwards: nothing changes
    assert_succeeded_where_it_was(job, epoch)


def test_a_notice_that_runs_out_after_the_final_checkpoint_ends_the_job_succeeded(noticed_job, no_celery):
    """The ranks saved the final model but their exits never came: the reconciler ends the notice."""
    job, node = noticed_job
    epoch = job.epoch
    report(job, node, *(metric(step) for step in range(6, LAST + 1)), checkpoint(job, LAST))
    reconcile(now=timezone.now() + timedelta(seconds=60))
    assert_succeeded_where_it_was(job, epoch)


def test_a_notice_checkpoint_before_the_last_step_still_moves_the_job(
    noticed_job, no_celery, django_capture_on_commit_callbacks
):
    job, node = noticed_job
    with django_capture_on_commit_callbacks(execute=True):
        report(job, node, metric(6), checkpoint(job, 6, stopping=True), EXIT)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and "checkpoint at step 6" in job.status_reason
    assert job.migrations.get().status == "waiting"
