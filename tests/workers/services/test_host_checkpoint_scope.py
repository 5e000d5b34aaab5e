"""Hosts are third parties (#28, RELIABILITY.md 37): a checkpoint report may name only the reported step's
tree under its own job's prefix. Before, a host named another user's dataset, which the pruner then deleted,
and another job's checkpoint, which the next placement resumed from."""

from __future__ import annotations

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from tests.support.plans import hand_plan
from tests.support.stored import keys, own_store_url, stored_checkpoint
from workers.models import JobCheckpoint, JobMetric
from workers.services.checkpoints import prune_checkpoints
from workers.services.datasets import store_dataset
from workers.services.placement import allocate, rank_launches

pytestmark = pytest.mark.django_db

REPORT = "/api/v1/agent/report/"


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.CHECKPOINT_KEEP = 1


@pytest.fixture
def placed(enroll, agent_api, planning_job):
    """Alice's job placed on one node, and a function that sends a checkpoint report as its host would."""
    node, token = enroll("a")
    job = planning_job(max_steps=100)
    allocate(job, hand_plan((node, 2)))
    job.refresh_from_db()
    api = agent_api(token)

    def report(step: int, path: str, *others: dict):
        item = {"kind": "checkpoint", "rank": 0, "step": step, "path": path, "seconds": 0.5, "t": time.time()}
        return api.post(REPORT, {"job_id": job.pk, "epoch": job.epoch, "items": [*others, item]}, format="json")

    return job, report


@pytest.fixture
def bobs_dataset(bob):
    upload = store_dataset(bob, SimpleUploadedFile("poems.txt", b"roses are red\n" * 20), name="poems")
    return upload.store_prefix


def test_a_report_naming_another_users_dataset_is_refused_and_the_pruner_never_deletes_it(
    placed, bobs_dataset, tmp_path
):
    job, report = placed
    before = keys(bobs_dataset)

    refused = report(5, f"store:{bobs_dataset}")
    for step in (10, 20, 30):  # the job's own checkpoints, enough for the pruner to act
        assert report(step, stored_checkpoint(job.pk, step, {"meta.json": b"m"}, tmp_path)).status_code == 200
    pruned = prune_checkpoints()

    assert keys(bobs_dataset) == before and len(before) == 2  # the file and its manifest
    assert bobs_dataset not in pruned.deleted
    assert refused.status_code == 400, refused.content
    assert refused.json()["code"] == "checkpoint_outside_job"
    assert f"store:checkpoints/job-{job.pk}/step-5" in refused.json()["detail"]
    assert not JobCheckpoint.objects.filter(key=bobs_dataset).exists()


@pytest.mark.parametrize(
    "path",
    [
        "store:checkpoints/job-{other}/step-10",  # another job's checkpoint
        "store:checkpoints/job-{job}/step-10/../../job-{other}/step-10",
        "store:checkpoints/job-{job}/step-11",  # not the reported step's tree
        "store:checkpoints/job-{job}",  # the whole prefix
        "/srv/starverse/checkpoints/job-{other}/step-10",  # a path on a disk the platform shares
    ],
)
def test_a_report_naming_anything_but_its_steps_own_tree_is_refused_and_changes_nothing(placed, path):
    job, report = placed
    other = job.pk + 1

    refused = report(10, path.format(job=job.pk, other=other))

    assert refused.status_code == 400 and refused.json()["code"] == "checkpoint_outside_job"
    job.refresh_from_db()
    assert (job.latest_checkpoint, job.latest_checkpoint_step) == ("", None)
    assert not JobCheckpoint.objects.filter(job=job).exists()


def test_a_refused_checkpoint_refuses_the_whole_report_so_nothing_is_half_applied(placed):
    job, report = placed
    metric = {"kind": "metric", "rank": 0, "step": 10, "loss": 2.5, "t": time.time()}

    refused = report(10, "store:datasets/1/x", metric)

    assert refused.status_code == 400
    assert not JobMetric.objects.filter(job=job).exists()


def test_a_resume_never_reads_another_jobs_checkpoint(placed, planning_job, enroll):
    job, report = placed
    other = planning_job(max_steps=100)

    refused = report(10, f"store:checkpoints/job-{other.pk}/step-10")
    # A row recorded before reports were checked: the next placement starts afresh rather than resume from it.
    other.latest_checkpoint = f"store:checkpoints/job-{job.pk}/step-10"
    other.save(update_fields=["latest_checkpoint"])
    node, _ = enroll("b")
    ((_, launch),) = rank_launches(other, hand_plan((node, 2)), {node.pk: node})

    assert refused.status_code == 400
    job.refresh_from_db()
    assert job.latest_checkpoint == ""
    assert launch.resume_from is None


def test_the_pruner_forgets_a_foreign_row_recorded_before_the_check_and_deletes_nothing(planning_job, bobs_dataset):
    job = planning_job(max_steps=100)
    before = keys(bobs_dataset)
    now = timezone.now()
    JobCheckpoint.objects.create(job=job, epoch=1, step=5, key=bobs_dataset, created_at=now)
    for step in (10, 20, 30):
        JobCheckpoint.objects.create(
            job=job, epoch=1, step=step, key=f"checkpoints/job-{job.pk}/step-{step}", created_at=now
        )

    pruned = prune_checkpoints()

    assert keys(bobs_dataset) == before
    assert bobs_dataset not in pruned.deleted
    assert not JobCheckpoint.objects.filter(key=bobs_dataset).exists()
