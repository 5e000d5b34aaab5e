"""Continue and chain (#31): `POST /api/v1/jobs/{id}/continue/` makes a new job linked to a finished one, starting
from one of its checkpoints with more steps; its launch resumes from that checkpoint, and its grant reads that
tree and no other job's. Refusals: a job that has not ended (409), another user's (404), an unknown checkpoint
or too few steps (400 naming the field)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from hosts.agent.commands import launch_from_dict
from tests.support.accounts import token_client
from tests.support.plans import hand_plan
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobCheckpoint
from workers.services import lifecycle
from workers.services.placement import allocate, resume_point
from workers.services.storage_grants import read_grant

pytestmark = pytest.mark.django_db

TREE = {"meta.json": b"{}", "model/config.json": b'{"model_type": "llama"}', "model/model.safetensors": b"\x01" * 64}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture(autouse=True)
def users_have_credit(fund, alice, bob):
    fund(alice)
    fund(bob)


@pytest.fixture(autouse=True)
def node(enroll):
    """A node a continuation could be placed on (a launch the fleet could never place is refused)."""
    return enroll("a", "rtx-4090", chips=2)[0]


def finished_job(owner, tmp_path, status=JobStatus.SUCCEEDED, steps=(10, 20), **fields) -> Job:
    job = Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=max(steps),
        max_budget_per_hour=28_000_000, status=status, step=max(steps), hyperparameters={"learning_rate": 1e-3},
        **fields,
    )  # fmt: skip
    for step in steps:
        path = stored_checkpoint(job.pk, step, TREE, tmp_path)
        JobCheckpoint.objects.create(
            job=job, epoch=1, step=step, key=path.removeprefix("store:"), created_at=timezone.now()
        )
        job.latest_checkpoint, job.latest_checkpoint_step = path, step
    job.save()
    return job


def post(user, job: Job, body: dict | None = None):
    return token_client(user).post(f"/api/v1/jobs/{job.pk}/continue/", body or {}, format="json")


def test_a_continuation_is_a_new_job_linked_to_the_old_that_resumes_from_its_checkpoint(
    alice, bob, node, tmp_path, no_celery
):
    old = finished_job(alice, tmp_path, status=JobStatus.STOPPED_NO_CREDIT)
    other = finished_job(bob, tmp_path)

    answer = post(
        alice, old, {"checkpoint_step": 10, "additional_steps": 30, "hyperparameters": {"learning_rate": 5e-4}}
    )

    assert answer.status_code == 201, answer.content
    new = Job.objects.get(pk=answer.json()["id"])
    assert (new.continued_from, new.start_checkpoint) == (old, f"checkpoints/job-{old.pk}/step-10")
    assert (new.step, new.max_steps, new.status, new.model_name) == (10, 40, JobStatus.QUEUED, "llama-tiny")
    assert new.hyperparameters["learning_rate"] == 5e-4
    assert new.quote.steps == 30  # the plan counts the steps left
    assert new.events.filter(message__contains=f"Continues job {old.pk} from its checkpoint at step 10").exists()
    assert resume_point(new) == f"store:checkpoints/job-{old.pk}/step-10"

    lifecycle.claim_for_planning(new.pk)
    assert allocate(new, hand_plan((node, 2)))
    launch = launch_from_dict(new.commands.get(type="start").payload["ranks"][0])
    assert launch.resume_from == f"store:checkpoints/job-{old.pk}/step-10"
    assert (launch.max_steps, launch.checkpoint_dir) == (40, f"store:checkpoints/job-{new.pk}")
    grant = read_grant(launch.storage_grant)
    assert grant.allows("GET", f"checkpoints/job-{old.pk}/step-10/meta.json")
    assert not grant.allows("GET", f"checkpoints/job-{old.pk}/step-20/meta.json")
    assert not grant.allows("GET", f"checkpoints/job-{other.pk}/step-10/meta.json")
    assert not grant.allows("PUT", f"checkpoints/job-{old.pk}/step-10/meta.json")
    assert grant.allows("PUT", f"checkpoints/job-{old.pk}/step-10/universal/manifest.json")  # converted once
    assert grant.allows("PUT", f"checkpoints/job-{new.pk}/step-20/meta.json")


def test_by_default_it_starts_at_the_last_checkpoint_and_goes_to_the_old_goal_when_short_of_it(
    alice, tmp_path, no_celery
):
    old = finished_job(alice, tmp_path, status=JobStatus.CANCELLED)
    Job.objects.filter(pk=old.pk).update(max_steps=100)

    answer = post(alice, old)

    assert answer.status_code == 201, answer.content
    new = Job.objects.get(pk=answer.json()["id"])
    assert (new.start_checkpoint, new.step, new.max_steps) == (f"checkpoints/job-{old.pk}/step-20", 20, 100)
    assert answer.json()["continued_from"] == old.pk


def test_its_own_checkpoints_take_over_from_the_start_checkpoint(alice, tmp_path, no_celery):
    old = finished_job(alice, tmp_path)
    new = Job.objects.get(pk=post(alice, old, {"max_steps": 60}).json()["id"])
    own = stored_checkpoint(new.pk, 30, TREE, tmp_path)
    Job.objects.filter(pk=new.pk).update(latest_checkpoint=own, latest_checkpoint_step=30)
    new.refresh_from_db()

    assert resume_point(new) == own


def test_a_start_checkpoint_of_another_users_job_is_never_a_resume_point(alice, bob, tmp_path, planning_job):
    theirs = finished_job(bob, tmp_path)
    job = planning_job(continued_from=theirs, start_checkpoint=f"checkpoints/job-{theirs.pk}/step-20")

    assert resume_point(job) is None


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"checkpoint_step": 15}, "checkpoint_step", "no checkpoint at step 15; its checkpoints are at steps 10, 20"),
        ({"max_steps": 20}, "max_steps", "must be more than that (not 20)"),
        ({"checkpoint_step": 10, "max_steps": 10}, "max_steps", "at step 10"),
        ({"max_steps": 50, "additional_steps": 5}, "additional_steps", "not both"),
        ({"model": "llama-2-7b", "max_steps": 50}, "model", "trains job"),
        ({"n_epochs": 2}, "n_epochs", "Unknown field"),
    ],
)
def test_bad_continuations_are_400s_naming_the_field(alice, tmp_path, no_celery, body, field, words):
    old = finished_job(alice, tmp_path)

    answer = post(alice, old, body)

    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"], answer.json()
    assert words in str(answer.json()["errors"][field])
    assert not Job.objects.filter(continued_from=old).exists()


def test_the_old_job_goal_reached_needs_more_steps(alice, tmp_path, no_celery):
    answer = post(alice, finished_job(alice, tmp_path))

    assert answer.status_code == 400
    assert "max_steps" in answer.json()["errors"]


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.QUEUED, JobStatus.STOPPING])
def test_a_job_that_has_not_ended_is_a_409_naming_its_status(alice, tmp_path, status):
    job = finished_job(alice, tmp_path, status=status)

    answer = post(alice, job, {"max_steps": 50})

    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "job_not_finished" and f"({status})" in answer.json()["detail"]


def test_another_users_job_is_a_404(alice, bob, tmp_path):
    answer = post(bob, finished_job(alice, tmp_path), {"max_steps": 50})

    assert answer.status_code == 404
    assert not Job.objects.filter(owner=bob).exists()


def test_a_job_without_checkpoints_has_nothing_to_continue(alice, tmp_path):
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        status=JobStatus.FAILED,
    )  # fmt: skip

    answer = post(alice, job, {"max_steps": 50})

    assert answer.status_code == 400
    assert "saved no checkpoint" in str(answer.json()["errors"]["checkpoint_step"])
