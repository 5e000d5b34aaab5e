"""The jobs list and the job page through Django's test client: status, charts' data, cancel, artifacts and
the model download."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.portal_pages import make_job
from tests.support.stored import downloaded, stored_checkpoint

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


# Jobs


def test_the_jobs_list_shows_my_jobs_newest_first(alice_client, alice, bob):
    older = make_job(alice, name="older")
    newer = make_job(alice, name="newer", status=JobStatus.RUNNING, step=50, loss=1.25)
    theirs = make_job(bob, name="bobs")
    html = alice_client.get(reverse("jobs")).content.decode()
    assert html.index(f'data-job="{newer.pk}"') < html.index(f'data-job="{older.pk}"')
    assert f'data-job="{theirs.pk}"' not in html
    assert "50 / 200" in html
    assert "1.2500" in html
    assert "Running" in html


def test_the_job_page_shows_status_progress_chip_mix_events_and_logs(alice_client, running_job):
    html = alice_client.get(reverse("job", args=[running_job.pk])).content.decode()
    assert 'data-testid="job-status">Running<' in html
    assert "Step <strong>50</strong> of 200 · 25%" in html
    assert "ETA" in html
    assert "sim-rtx-4090-01" in html and "sim-tpu-v5e-01" in html
    assert "Google TPU v5e" in html
    assert 'data-testid="plan-price">¥4.00/h' in html
    assert "Placed on 1 × rtx-4090 + 1 × tpu-v5e" in html
    assert "step 50 loss 2.5000" in html
    assert reverse("job_metrics", args=[running_job.pk]) in html
    assert 'hx-trigger="every 2s"' in html
    assert 'data-testid="cancel"' in html


def test_the_job_page_shows_why_a_job_failed(alice_client, alice):
    job = make_job(
        alice,
        status=JobStatus.FAILED,
        status_reason="Rank 1 exited with code 1: CUDA out of memory",
        finished_at=timezone.now(),
    )
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "Rank 1 exited with code 1: CUDA out of memory" in html
    assert 'data-testid="cancel"' not in html
    assert "hx-trigger" not in html[html.index('id="job-poller"') :]


@pytest.mark.parametrize("name", ["job", "job_live", "job_metrics"])
def test_another_users_job_is_not_found(client, bob, running_job, name):
    client.force_login(bob)
    assert client.get(reverse(name, args=[running_job.pk])).status_code == 404


def test_another_user_cannot_cancel_a_job(client, bob, alice):
    job = make_job(alice)
    client.force_login(bob)
    assert client.post(reverse("job_cancel", args=[job.pk])).status_code == 404
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_cancelling_a_queued_job_cancels_it(alice_client, alice):
    job = make_job(alice)
    response = alice_client.post(reverse("job_cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert 'data-testid="job-status">Cancelled<' in alice_client.get(response.url).content.decode()


def test_cancelling_through_htmx_returns_the_finished_sections(alice_client, alice):
    job = make_job(alice)
    response = alice_client.post(reverse("job_cancel", args=[job.pk]), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert 'id="job-status" class="job-status" hx-swap-oob="true"' in html
    assert "Cancelled" in html
    assert "job-poller" not in html  # the poller's own next answer stops it (tests/portal/test_job_page.py)


def test_the_live_partial_keeps_polling_while_the_job_runs(alice_client, running_job):
    html = alice_client.get(reverse("job_live", args=[running_job.pk])).content.decode()
    assert html.count('hx-swap-oob="true"') == 5  # the logs follow on their own (tests/portal/test_job_page.py)
    assert "job-poller" not in html
    assert "Step <strong>50</strong> of 200" in html


def test_the_metrics_endpoint_returns_steps_after_since_step(alice_client, running_job):
    body = alice_client.get(reverse("job_metrics", args=[running_job.pk]), {"since_step": 49}).json()
    assert body["job"] == running_job.pk
    assert body["steps"] == [{"step": 50, "epoch": 1, "loss": 2.5, "tokens_per_s": 1024.0}]
    assert [(r["rank"], r["chip"], r["measured_tokens_per_s"]) for r in body["ranks"]] == [
        (0, "rtx-4090", 400.0),
        (1, "tpu-v5e", 624.0),
    ]


def test_the_metrics_endpoint_refuses_a_bad_since_step(alice_client, running_job):
    response = alice_client.get(reverse("job_metrics", args=[running_job.pk]), {"since_step": "x"})
    assert response.status_code == 400


def test_artifacts_are_listed_and_downloaded(alice_client, alice, tmp_path):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    stored_checkpoint(job.pk, job.max_steps, {"model/model.safetensors": b"weights"}, tmp_path)
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    url = reverse("job_artifact", args=[job.pk, f"step-{job.max_steps}/model/model.safetensors"])
    assert url in html
    assert "final model" in html
    assert downloaded(alice_client.get(url)) == b"weights"


def test_an_artifact_in_a_storage_folder_is_streamed_by_the_web(alice_client, alice, settings, tmp_path):
    settings.STORAGE_URL = f"file://{tmp_path / 'folder-store'}"
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    stored_checkpoint(job.pk, 3, {"meta.json": b"{}"}, tmp_path)

    response = alice_client.get(reverse("job_artifact", args=[job.pk, "step-3/meta.json"]))

    assert response.status_code == 200 and b"".join(response.streaming_content) == b"{}"
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}-step-3-meta.json"'


def test_an_artifact_path_outside_the_job_is_not_found(alice_client, alice, bob, tmp_path):
    job, theirs = make_job(alice), make_job(bob)
    stored_checkpoint(theirs.pk, 1, {"secret.txt": b"no"}, tmp_path)
    url = reverse("job_artifact", args=[job.pk, "x"]).removesuffix("x") + f"../job-{theirs.pk}/step-1/secret.txt"
    assert alice_client.get(url).status_code == 404


def test_a_finished_lora_job_offers_its_adapter_and_merged_weights_with_the_lines_that_load_them(
    alice_client, alice, tmp_path
):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now(), mode="lora", lora={"r": 8})
    files = {}
    for folder, name in (("model", "model.safetensors"), ("adapter", "adapter_model.safetensors")):
        files |= {f"{folder}/config.json": b"{}", f"{folder}/{name}": b"weights"}
    final = stored_checkpoint(job.pk, job.max_steps, files, tmp_path)
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=final, latest_checkpoint_step=job.max_steps)
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "Download model" in html and "Download merged weights" in html
    assert "PeftModel.from_pretrained" in html
    assert f"AutoModelForCausalLM.from_pretrained(&quot;./job-{job.pk}-merged&quot;)" in html
    response = alice_client.get(reverse("job_model", args=[job.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
        names = sorted(archive.getnames())
    assert names == [
        f"job-{job.pk}-adapter/README.md",
        f"job-{job.pk}-adapter/adapter_model.safetensors",
        f"job-{job.pk}-adapter/config.json",
    ]


def test_a_running_job_has_no_model_to_download(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    assert "Download model" not in alice_client.get(reverse("job", args=[job.pk])).content.decode()
    assert alice_client.get(reverse("job_model", args=[job.pk])).status_code == 404
