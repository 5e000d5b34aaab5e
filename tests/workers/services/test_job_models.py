"""`job:<id>` names a finished job's trained model (#31): the owner's own ended job whose latest checkpoint holds
an exported model/; a new job launched on it stages that folder alone, and its grant reads that tree. Another
user's job, one still running, or one without an exported model is refused, saying why."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from hosts.agent.commands import launch_from_dict
from kernel.modelspecs import CATALOG
from tests.support.plans import hand_plan
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobCheckpoint
from workers.services.models import ModelUnavailable, resolve_model_source
from workers.services.placement import allocate, launch_model
from workers.services.storage_grants import read_grant

pytestmark = pytest.mark.django_db

CONFIG = dict(CATALOG["llama-tiny"].config)


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


def trained(owner, tmp_path, status=JobStatus.SUCCEEDED, files=None) -> Job:
    job = Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=20, max_budget_per_hour=28_000_000,
        status=status, step=20, name="tiny run",
    )  # fmt: skip
    tree = files or {"meta.json": b"{}", "model/config.json": json.dumps(CONFIG).encode(), "model/w.safetensors": b"1"}
    path = stored_checkpoint(job.pk, 20, tree, tmp_path)
    JobCheckpoint.objects.create(job=job, epoch=1, step=20, key=path.removeprefix("store:"), created_at=timezone.now())
    job.latest_checkpoint, job.latest_checkpoint_step = path, 20
    job.save()
    return job


def test_a_finished_jobs_model_is_its_latest_checkpoints_model_folder(alice, tmp_path):
    job = trained(alice, tmp_path, status=JobStatus.STOPPED_NO_CREDIT)

    source = resolve_model_source(f"job:{job.pk}", owner=alice)

    assert (source.reference, source.source) == (f"job:{job.pk}", "job")
    assert (source.store_prefix, source.store_folder) == (f"checkpoints/job-{job.pk}/step-20", "model")
    assert source.config == CONFIG and source.shape.parameters > 0
    assert "tiny run" in source.name


def test_another_users_job_is_never_resolved_for_them(alice, bob, tmp_path):
    job = trained(alice, tmp_path)

    with pytest.raises(ModelUnavailable, match=f"no job job:{job.pk} among yours"):
        resolve_model_source(f"job:{job.pk}", owner=bob)


def test_a_running_job_or_one_without_an_exported_model_is_refused(alice, tmp_path):
    running = trained(alice, tmp_path, status=JobStatus.RUNNING)
    adapter_only = trained(alice, tmp_path, files={"meta.json": b"{}", "adapter/adapter_config.json": b"{}"})

    with pytest.raises(ModelUnavailable, match="once it has ended"):
        resolve_model_source(f"job:{running.pk}", owner=alice)
    with pytest.raises(ModelUnavailable, match="holds no exported model"):
        resolve_model_source(f"job:{adapter_only.pk}", owner=alice)


def test_a_job_on_another_jobs_model_stages_that_folder_and_reads_only_that_tree(
    alice, tmp_path, enroll, planning_job, fund
):
    previous = trained(alice, tmp_path)
    other = trained(alice, tmp_path)
    node, _ = enroll("a")
    fund(alice)
    job = planning_job(model_name=f"job:{previous.pk}", max_steps=30)

    model = launch_model(job)
    assert allocate(job, hand_plan((node, 1)))

    assert (model["path"], model["folder"]) == (f"store:checkpoints/job-{previous.pk}/step-20", "model")
    launch = launch_from_dict(job.commands.get(type="start").payload["ranks"][0])
    assert launch.resume_from is None  # a new job on those weights, not a continuation
    grant = read_grant(launch.storage_grant)
    assert grant.allows("GET", f"checkpoints/job-{previous.pk}/step-20/model/config.json")
    assert not grant.allows("GET", f"checkpoints/job-{other.pk}/step-20/model/config.json")
    assert not grant.allows("PUT", f"checkpoints/job-{previous.pk}/step-20/model/config.json")


def test_the_api_takes_a_job_reference_of_ones_own_and_refuses_anothers(alice, bob, tmp_path, api_for, enroll, fund):
    enroll("a")
    fund(alice)
    fund(bob)
    job = trained(alice, tmp_path)
    spec = {"model": f"job:{job.pk}", "per_device_batch_size": 4, "max_steps": 10, "max_budget": "28"}

    mine = api_for(alice).post("/api/v1/quotes/", spec, format="json")
    theirs = api_for(bob).post("/api/v1/quotes/", spec, format="json")

    assert mine.status_code == 200, mine.content
    assert theirs.status_code == 400 and "among yours" in str(theirs.json()["errors"]["model"])
