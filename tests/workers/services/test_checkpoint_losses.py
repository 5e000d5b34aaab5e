"""A checkpoint report carries the step's train loss and, when measured there, the held-out loss (#31): the
agent's report stores both on the JobCheckpoint, and an eval of that step that comes after the checkpoint (the
end's eval follows the last save) fills in a held-out loss the report lacked."""

from __future__ import annotations

import time

import pytest

from tests.support.plans import hand_plan
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobCheckpoint
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db

REPORT = "/api/v1/agent/report/"


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def placed(enroll, agent_api, planning_job):
    """Alice's job placed on one node, and a function that sends report items as its host would."""
    node, token = enroll("a")
    job = planning_job(max_steps=100)
    allocate(job, hand_plan((node, 2)))
    job.refresh_from_db()
    api = agent_api(token)

    def report(*items: dict):
        items = [{"rank": 0, "t": time.time(), **item} for item in items]
        answer = api.post(REPORT, {"job_id": job.pk, "epoch": job.epoch, "items": items}, format="json")
        assert answer.status_code == 200, answer.content

    return job, report


def test_the_reported_losses_are_stored_on_the_checkpoint(placed, tmp_path, api_for, alice):
    job, report = placed
    path = stored_checkpoint(job.pk, 10, {"meta.json": b"{}"}, tmp_path)

    report(
        {"kind": "eval", "step": 10, "eval_loss": 2.75, "eval_tokens": 64},
        {"kind": "checkpoint", "step": 10, "path": path, "seconds": 0.5, "loss": 2.5, "eval_loss": 2.75},
    )

    row = JobCheckpoint.objects.get(job=job, step=10)
    assert (row.loss, row.eval_loss) == (2.5, 2.75)
    listed = api_for(alice).get(f"/api/v1/jobs/{job.pk}/checkpoints/").json()["checkpoints"]
    assert [(entry["step"], entry["loss"], entry["eval_loss"]) for entry in listed] == [(10, 2.5, 2.75)]


def test_an_eval_after_its_checkpoint_fills_in_the_held_out_loss(placed, tmp_path):
    job, report = placed
    path = stored_checkpoint(job.pk, 20, {"meta.json": b"{}"}, tmp_path)

    report({"kind": "checkpoint", "step": 20, "path": path, "seconds": 0.5, "loss": 1.5, "eval_loss": None})
    before = JobCheckpoint.objects.get(job=job, step=20).eval_loss
    report({"kind": "eval", "step": 20, "eval_loss": 1.75, "eval_tokens": 64})

    assert before is None
    row = JobCheckpoint.objects.get(job=job, step=20)
    assert (row.loss, row.eval_loss) == (1.5, 1.75)


def test_a_report_without_losses_from_an_older_runtime_leaves_them_empty(placed, tmp_path):
    job, report = placed
    path = stored_checkpoint(job.pk, 30, {"meta.json": b"{}"}, tmp_path)

    report({"kind": "checkpoint", "step": 30, "path": path, "seconds": 0.5})

    row = JobCheckpoint.objects.get(job=job, step=30)
    assert (row.loss, row.eval_loss) == (None, None)
