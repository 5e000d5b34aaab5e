"""A launch names the inputs it trains on by storage key (store:...), and a rank on a host that shares no
disk with the platform stages exactly those files from the store (hosts/runtime/staging.py), through its
launch's storage grant: the host is given no store credentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from fleet.choices import JobStatus
from fleet.models import Job, Node, Pool
from hosts.agent.commands import launch_from_dict
from hosts.runtime import staging
from tests.support.plans import hand_plan
from tests.support.stored import grants_answered_here, keys, own_store_url
from tests.workers.services.test_resolve_model_source import REVISION, cache_repo, upload_of
from workers.models import EnrollmentToken
from workers.services.datasets import store_dataset
from workers.services.enrollment import enroll_node
from workers.services.models import store_model
from workers.services.placement import allocate, rank_launches

pytestmark = pytest.mark.django_db

CHAT = {"messages": [{"role": "user", "content": "the chip runs"}, {"role": "assistant", "content": "runs"}]}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path, monkeypatch):
    """The platform's store; this test's "host" reaches it only with the grants in its launches (the AWS_*
    variables stay: the platform, in this same process, signs with them)."""
    settings.STORAGE_URL = own_store_url(tmp_path)
    monkeypatch.delenv("STORAGE_URL", raising=False)
    monkeypatch.setenv(staging.CACHE_DIR_ENV, str(tmp_path / "host-cache"))
    grants_answered_here(monkeypatch)
    yield
    staging.storage_for_grant.cache_clear()


@pytest.fixture
def node(catalog) -> Node:
    """A simulated one-chip RTX 4090 node."""
    _, raw = EnrollmentToken.issue(Pool.objects.get(chip_type__slug="rtx-4090"), chips=1)
    enrolled = enroll_node(
        enrollment_token=raw, hostname="a", chip_type="rtx-4090", chips=1, simulated=True, spot_eligible=False,
        address="127.0.0.1",
    )  # fmt: skip
    return enrolled.node


def job_of(owner, **fields) -> Job:
    defaults = {"per_device_batch_size": 4, "max_steps": 10, "max_budget_per_hour": 28_000_000}
    return Job.objects.create(owner=owner, status=JobStatus.PLANNING, **{**defaults, **fields})


def test_a_launch_names_the_stored_model_dataset_and_eval_set_and_a_host_stages_them(
    alice, node, fund, model_dirs, tmp_path
):
    model = store_model(alice, upload_of(model_dirs["llama"], tmp_path), "mine")
    data = store_dataset(alice, SimpleUploadedFile("chat.jsonl", json.dumps(CHAT).encode()), name="chat")
    held_out = store_dataset(alice, SimpleUploadedFile("eval.txt", b"the chip\nruns\n"), name="eval")
    job = job_of(alice, model_name=model.reference, dataset_upload=data, eval_dataset_upload=held_out)
    fund(alice)

    assert allocate(job, hand_plan((node, 4)))  # placed: its host's grant is good while the placement lasts
    launch = launch_from_dict(job.commands.get(type="start").payload["ranks"][0])

    assert launch.dataset == f"store:datasets/{alice.pk}/{data.store_prefix.rsplit('/', 1)[1]}/data.jsonl"
    assert launch.eval_dataset == f"store:{held_out.store_prefix}/data.txt"
    assert launch.model["path"] == f"store:models/{alice.pk}/{model.store_prefix.rsplit('/', 1)[1]}"
    launch.run_dir = str(tmp_path / "host" / "run")
    staged = staging.stage_inputs(launch)
    assert json.loads(Path(staged.dataset).read_text()) == CHAT
    assert Path(staged.eval_dataset).read_text() == "the chip\nruns\n"
    assert (Path(staged.model["path"]) / "model.safetensors").read_bytes() == (
        model_dirs["llama"] / "model.safetensors"
    ).read_bytes()


def test_a_catalog_model_on_synthetic_data_names_nothing_stored(alice, node):
    job = job_of(alice, model_name="llama-tiny")

    ((_, launch),) = rank_launches(job, hand_plan((node, 4)), {node.pk: node})

    assert (launch.dataset, launch.eval_dataset, launch.model["path"]) == ("synthetic", None, None)


def test_a_hub_models_snapshot_is_stored_at_its_first_placement_and_named_by_the_launch(
    alice, node, fund, model_dirs, monkeypatch, tmp_path
):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    cache_repo(tmp_path / "hf-home", "tiny-org/tiny-llama", model_dirs["llama"])
    fund(alice)
    job = job_of(alice, model_name="tiny-org/tiny-llama")
    assert keys("hub") == []

    assert allocate(job, hand_plan((node, 4)))

    prefix = f"hub/tiny-org--tiny-llama/{REVISION}"
    assert f"{prefix}/manifest.json" in keys("hub")
    (start,) = job.commands.all()
    assert start.payload["ranks"][0]["model"]["path"] == f"store:{prefix}"
