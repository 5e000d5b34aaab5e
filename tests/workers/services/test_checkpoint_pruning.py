"""Checkpoints in object storage: each one the ranks report is recorded, and the beat's pruning pass keeps
the last CHECKPOINT_KEEP periodic ones, every stopping one, the latest and the final, deleting the rest;
what a crashed save left (no manifest) goes once it is an hour old."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from kernel.storage.trees import read_manifest, upload_files
from portal.celery import app as celery_app
from tests.support.plans import hand_plan
from tests.support.stored import keys, own_store_url, stored_checkpoint
from workers.models import JobCheckpoint
from workers.services.checkpoints import checkpoints_to_keep, prune_checkpoints, sweep_incomplete
from workers.services.placement import allocate
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.CHECKPOINT_KEEP = 2


@pytest.fixture
def placed(enroll, agent_api, planning_job):
    """A job placed on one node, and a function that reports a checkpoint the way its rank 0 would."""
    node, token = enroll("a")
    job = planning_job(max_steps=100)
    allocate(job, hand_plan((node, 2)))
    job.refresh_from_db()
    api = agent_api(token)

    def report(step: int, path: str, stopping: bool = False) -> None:
        item = {"kind": "checkpoint", "rank": 0, "step": step, "path": path, "seconds": 0.5, "stopping": stopping}
        body = {"job_id": job.pk, "epoch": job.epoch, "items": [{**item, "t": time.time()}]}
        assert api.post("/api/v1/agent/report/", body, format="json").status_code == 200

    return job, report


def checkpoint(job, step: int, tmp_path, size: int = 10) -> str:
    return stored_checkpoint(job.pk, step, {"meta.json": b"m" * size, "ds/mp_rank_00_model_states.pt": b"s"}, tmp_path)


def test_each_reported_checkpoint_is_recorded_with_its_epoch_step_and_stopping_flag(placed, tmp_path):
    job, report = placed
    report(10, checkpoint(job, 10, tmp_path))
    report(20, checkpoint(job, 20, tmp_path), stopping=True)

    rows = list(JobCheckpoint.objects.filter(job=job).values_list("epoch", "step", "key", "stopping"))

    assert rows == [
        (job.epoch, 10, f"checkpoints/job-{job.pk}/step-10", False),
        (job.epoch, 20, f"checkpoints/job-{job.pk}/step-20", True),
    ]
    job.refresh_from_db()
    assert job.latest_checkpoint == f"store:checkpoints/job-{job.pk}/step-20"


def test_a_checkpoint_reported_twice_is_one_row_and_a_stopping_report_marks_it(placed, tmp_path):
    job, report = placed
    path = checkpoint(job, 10, tmp_path)
    report(10, path)
    report(10, path, stopping=True)

    assert list(JobCheckpoint.objects.filter(job=job).values_list("step", "stopping")) == [(10, True)]


def test_pruning_keeps_the_last_periodic_ones_every_stopping_one_the_latest_and_the_final(placed, tmp_path):
    job, report = placed
    for step in (10, 20, 30):
        report(step, checkpoint(job, step, tmp_path))
    report(35, checkpoint(job, 35, tmp_path), stopping=True)  # a reclaim notice
    for step in (40, 50, 60):
        report(step, checkpoint(job, step, tmp_path))

    pruned = prune_checkpoints()

    kept = sorted(JobCheckpoint.objects.filter(job=job).values_list("step", flat=True))
    assert kept == [35, 50, 60]
    assert sorted(pruned.deleted) == [f"checkpoints/job-{job.pk}/step-{step}" for step in (10, 20, 30, 40)]
    assert {key.split("/")[2] for key in keys(f"checkpoints/job-{job.pk}")} == {"step-35", "step-50", "step-60"}
    assert read_manifest(platform_store(), f"checkpoints/job-{job.pk}/step-10") is None
    assert prune_checkpoints().deleted == []  # nothing more to do


def test_the_latest_and_the_final_are_kept_whatever_their_order(planning_job, tmp_path):
    job = planning_job(max_steps=100, latest_checkpoint="store:checkpoints/job-1/step-20")
    now = timezone.now()
    rows = [
        JobCheckpoint(pk=pk, job=job, epoch=1, step=step, key=f"checkpoints/job-1/step-{step}", created_at=now)
        for pk, step in [(1, 10), (2, 20), (3, 30), (4, 40), (5, 100), (6, 50)]
    ]

    def kept(keep_periodic: int) -> list[int]:
        return sorted(row.step for row in rows if row.pk in checkpoints_to_keep(job, rows, keep_periodic))

    assert kept(2) == [20, 50, 100]  # the last two periodic ones by step (not by id), and the latest
    assert kept(0) == [20, 100]  # the latest, and the final (max_steps) one


def test_pruning_fills_in_each_checkpoints_size_from_its_manifest(placed, tmp_path):
    job, report = placed
    report(10, checkpoint(job, 10, tmp_path, size=1000))

    prune_checkpoints()

    assert JobCheckpoint.objects.get(job=job).bytes == 1000 + 1


def test_a_save_that_crashed_is_swept_an_hour_later_and_complete_ones_never(placed, tmp_path):
    job, _ = placed
    store = platform_store()
    checkpoint(job, 10, tmp_path)
    (tmp_path / "half" / "ds").mkdir(parents=True)
    (tmp_path / "half" / "ds" / "shard.pt").write_bytes(b"half")
    upload_files(store, f"checkpoints/job-{job.pk}/step-20", tmp_path / "half", ["ds/shard.pt"])
    upload_files(store, f"checkpoints/job-{job.pk}/step-10/universal", tmp_path / "half", ["ds/shard.pt"])

    assert sweep_incomplete(store, timezone.now()) == []  # still being written, for all we know
    swept = sweep_incomplete(store, timezone.now() + timedelta(hours=1, minutes=1))

    assert swept == [f"checkpoints/job-{job.pk}/step-10/universal", f"checkpoints/job-{job.pk}/step-20"]
    assert keys(f"checkpoints/job-{job.pk}") == [
        f"checkpoints/job-{job.pk}/step-10/ds/mp_rank_00_model_states.pt",
        f"checkpoints/job-{job.pk}/step-10/manifest.json",
        f"checkpoints/job-{job.pk}/step-10/meta.json",
    ]


def test_pruning_runs_on_the_beat():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["prune-checkpoints"]
    assert entry["task"] == "workers.tasks.prune_checkpoints" and entry["schedule"] > 0
    celery_app.loader.import_default_modules()
    assert "workers.tasks.prune_checkpoints" in celery_app.tasks
