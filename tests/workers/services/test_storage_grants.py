"""Hosts are third parties (#28, RELIABILITY.md 37): a host gets no store credentials, only a grant per
placement in its START command, with which its ranks ask `POST /api/v1/agent/storage/` for URLs. The platform
signs GETs only for the placement's inputs and its job's checkpoints, PUTs only under the job's checkpoints,
and nothing once the placement is over; each URL reaches its one object."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.choices import JobStatus
from hosts.agent.commands import launch_from_dict
from kernel.storage import grants
from kernel.storage.grants import GrantRefused, GrantStore
from tests.support.plans import hand_plan
from tests.support.stored import grants_answered_here, keys, own_store_url
from workers.services import lifecycle
from workers.services.datasets import store_dataset
from workers.services.placement import allocate
from workers.services.storage import platform_store
from workers.services.storage_grants import issue_grant

pytestmark = pytest.mark.django_db

STORAGE = "/api/v1/agent/storage/"


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def placed(enroll, planning_job, alice, bob, fund):
    """Alice's job on an uploaded dataset, placed on node a; bob's dataset beside it in the store."""
    node, _ = enroll("a")
    mine = store_dataset(alice, SimpleUploadedFile("mine.txt", b"alice's words\n" * 10), name="mine")
    theirs = store_dataset(bob, SimpleUploadedFile("theirs.txt", b"bob's secrets\n" * 10), name="theirs")
    job = planning_job(max_steps=100, dataset_upload=mine)
    fund(alice)
    assert allocate(job, hand_plan((node, 2)))
    job.refresh_from_db()
    launch = launch_from_dict(job.commands.get(type="start").payload["ranks"][0])
    return {"job": job, "node": node, "launch": launch, "mine": mine.store_prefix, "theirs": theirs.store_prefix}


def ask(grant: str, method: str, *keys: str, **extra):
    body = {"method": method, "keys": list(keys), **extra}
    return APIClient().post(STORAGE, body, format="json", HTTP_AUTHORIZATION=f"Bearer {grant}")


def s3_only():
    if not django_settings.STORAGE_URL.startswith("s3://"):
        pytest.skip("a folder store is one machine's: its URLs are file paths, with no isolation (docs/STORAGE.md)")


def test_a_start_command_carries_a_grant_and_no_store_credential(placed):
    payload = json.dumps(placed["job"].commands.get(type="start").payload)

    assert placed["launch"].storage_grant.startswith("svg_")
    for secret in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(secret)
        assert not value or value not in payload


def test_a_get_is_signed_for_the_placements_inputs_and_its_url_reads_that_object(placed):
    s3_only()
    key = f"{placed['mine']}/data.txt"

    answer = ask(placed["launch"].storage_grant, "GET", key)

    assert answer.status_code == 200, answer.content
    assert httpx.get(answer.json()["urls"][key]).content == b"alice's words\n" * 10


def test_a_grant_url_for_one_object_cannot_read_another(placed):
    s3_only()
    mine, theirs = f"{placed['mine']}/data.txt", f"{placed['theirs']}/data.txt"
    url = ask(placed["launch"].storage_grant, "GET", mine).json()["urls"][mine]

    forged = httpx.get(url.replace(placed["mine"], placed["theirs"]))

    assert forged.status_code == 403
    assert b"bob's secrets" not in forged.content
    assert platform_store().get_bytes(theirs) == b"bob's secrets\n" * 10


def test_a_get_outside_the_placement_is_refused_naming_the_keys(placed):
    theirs = f"{placed['theirs']}/data.txt"
    other_job = f"checkpoints/job-{placed['job'].pk + 1}/step-10/meta.json"

    answer = ask(placed["launch"].storage_grant, "GET", f"{placed['mine']}/data.txt", theirs, other_job)

    assert answer.status_code == 403
    assert answer.json()["code"] == "outside_grant"
    assert answer.json()["errors"] == {"keys": [theirs, other_job]}
    assert "urls" not in answer.json()


@pytest.mark.parametrize(
    "key",
    [
        "{mine}/data.txt",  # an input of its own is read, never written
        "{theirs}/data.txt",
        "checkpoints/job-{other}/step-10/meta.json",
        "checkpoints/job-{job}0/step-10/meta.json",  # a job whose id starts with this one's
        "checkpoints/job-{job}/../job-{other}/step-10/meta.json",
    ],
)
def test_a_put_outside_the_jobs_checkpoints_is_refused(placed, key):
    job = placed["job"]
    key = key.format(mine=placed["mine"], theirs=placed["theirs"], job=job.pk, other=job.pk + 1)

    answer = ask(placed["launch"].storage_grant, "PUT", key)

    assert answer.status_code in (400, 403), answer.content
    assert answer.json()["code"] in ("outside_grant", "invalid_key")


def test_a_put_under_the_jobs_checkpoints_is_signed_and_writes_only_that_object(placed):
    s3_only()
    key = f"checkpoints/job-{placed['job'].pk}/step-10/meta.json"

    answer = ask(placed["launch"].storage_grant, "PUT", key)
    stored = httpx.put(answer.json()["urls"][key], content=b"{}")
    elsewhere = httpx.put(answer.json()["urls"][key].replace(f"job-{placed['job'].pk}/", "job-999999/"), content=b"x")

    assert (answer.status_code, stored.status_code, elsewhere.status_code) == (200, 200, 403)
    assert platform_store().get_bytes(key) == b"{}"
    assert keys("checkpoints/job-999999") == []


def test_a_stale_epochs_grant_is_refused(placed):
    job, grant = placed["job"], placed["launch"].storage_grant
    key = f"checkpoints/job-{job.pk}/step-10/meta.json"
    lifecycle.fence(job, timezone.now())  # e.g. its node was declared lost

    answer = ask(grant, "PUT", key)

    assert answer.status_code == 409 and answer.json()["code"] == "grant_expired"


def test_an_ended_jobs_grant_is_refused(placed):
    job, grant = placed["job"], placed["launch"].storage_grant
    lifecycle.finish(job, JobStatus.CANCELLED, "cancelled", timezone.now())

    answer = ask(grant, "GET", f"{placed['mine']}/data.txt")

    assert answer.status_code == 409 and answer.json()["code"] == "grant_expired"


def test_a_forged_grant_or_one_for_a_node_without_the_job_is_refused(placed, enroll):
    job, launch = placed["job"], placed["launch"]
    elsewhere, _ = enroll("b")
    key = f"{placed['mine']}/data.txt"

    forged = ask(launch.storage_grant[:-4] + "AAAA", "GET", key)
    other_node = ask(issue_grant(job, elsewhere, launch), "GET", key)
    node_token = APIClient().post(
        STORAGE, {"method": "GET", "keys": [key]}, format="json", HTTP_AUTHORIZATION="Bearer svn_x"
    )

    assert (forged.status_code, forged.json()["code"]) == (401, "not_a_grant")
    assert (other_node.status_code, other_node.json()["code"]) == (403, "not_placed_here")
    assert node_token.status_code == 401


def test_a_request_naming_no_keys_or_a_bad_method_gets_a_400_naming_the_field(placed):
    grant = placed["launch"].storage_grant

    no_keys = APIClient().post(STORAGE, {"method": "GET"}, format="json", HTTP_AUTHORIZATION=f"Bearer {grant}")
    bad_method = ask(grant, "DELETE", "x")

    assert no_keys.status_code == 400 and "keys" in no_keys.json()["errors"]
    assert bad_method.status_code == 400 and "method" in bad_method.json()["errors"]


def test_a_rank_writes_its_checkpoint_through_the_grant_and_is_refused_elsewhere(placed, monkeypatch, tmp_path):
    grants_answered_here(monkeypatch)
    store = GrantStore("http://platform.test", placed["launch"].storage_grant)
    own = f"checkpoints/job-{placed['job'].pk}/step-10/meta.json"

    store.put_bytes(own, b'{"step": 10}')

    assert platform_store().get_bytes(own) == b'{"step": 10}'
    with pytest.raises(GrantRefused, match="outside_grant|granted only"):
        store.put_bytes(f"{placed['theirs']}/data.txt", b"overwritten")
    assert platform_store().get_bytes(f"{placed['theirs']}/data.txt") == b"bob's secrets\n" * 10


def test_a_large_checkpoint_file_is_uploaded_in_parts_through_the_grant(placed, monkeypatch, tmp_path):
    s3_only()
    grants_answered_here(monkeypatch)
    monkeypatch.setattr(grants, "MULTIPART_BYTES", 1024)  # "large": anything over 1 KiB here
    store = GrantStore("http://platform.test", placed["launch"].storage_grant)
    shard = tmp_path / "shard.pt"
    shard.write_bytes(b"w" * 5000)
    key = f"checkpoints/job-{placed['job'].pk}/step-10/ds/shard.pt"
    signed = []
    monkeypatch.setattr(store, "_upload_parts", _recording(store._upload_parts, signed))

    store.put_file(key, shard)

    assert signed == [key]
    assert platform_store().get_bytes(key) == b"w" * 5000


def _recording(upload_parts, calls: list):
    def record(key, path, upload):
        calls.append(key)
        return upload_parts(key, path, upload)

    return record
