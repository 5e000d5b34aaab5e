"""The training pages through Django's test client: launch with a live quote, jobs, the job page, datasets."""

from __future__ import annotations

import io
import tarfile
from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from fleet.choices import AgentStatus, JobEventKind, JobStatus
from fleet.models import Allocation, Dataset, Job, Node
from tests.support.stored import downloaded, stored_checkpoint
from workers.models import JobLogLine, JobMetric
from workers.services.events import record_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]

LAUNCH = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "policy": "cost-performance",
    "max_budget": "28",
    "max_steps": "200",
    "per_device_batch_size": "4",
}


def bring_online(*chips: str) -> None:
    """Seeded nodes start unenrolled; put those of these chip types (or all) online."""
    nodes = Node.objects.filter(pool__chip_type__slug__in=chips) if chips else Node.objects.all()
    nodes.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())


def quote_html(client, **changes) -> str:
    response = client.post(reverse("train_quote"), {**LAUNCH, **changes})
    assert response.status_code == 200
    return response.content.decode()


def launch(client, **changes):
    return client.post(reverse("train"), {**LAUNCH, **changes})


def rank(chip: str, hostname: str, micro_batch: int, tokens_per_s: float, simulated: bool = True) -> dict:
    return {
        "chip": chip,
        "node_id": 1,
        "hostname": hostname,
        "pool": f"{chip}-cn-east-1",
        "micro_batch": micro_batch,
        "mode": "on_demand",
        "tokens_per_s": tokens_per_s,
        "memory_gib": 1.0,
        "simulated": simulated,
    }


PLAN = {
    "policy": "cost-performance",
    "model": "llama-tiny",
    "world_size": 2,
    "chip_counts": {"rtx-4090": {"on_demand": 1}, "tpu-v5e": {"on_demand": 1}},
    "ranks": [
        rank("rtx-4090", "sim-rtx-4090-01", 3, 40_000.0),
        rank("tpu-v5e", "sim-tpu-v5e-01", 5, 60_000.0),
    ],
    "zero_stage": 1,
    "global_batch": 8,
    "tokens_per_step": 512,
    "step_seconds": 0.005,
    "comm_seconds": 0.001,
    "link_gbps": 100,
    "tokens_per_s": 100_000.0,
    "price_per_hour": 4_000_000,
    "price_per_million_tokens": 11_111,
    "eta_seconds": 1.0,
    "total_cost": 1_111,
    "throughput_source": {},
    "baseline": None,
    "speedup_vs_baseline": None,
    "cost_ratio_vs_baseline": None,
}


def make_job(owner, **fields) -> Job:
    defaults = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 200,
        "max_budget_per_hour": 28_000_000,
    }
    return Job.objects.create(owner=owner, **{**defaults, **fields})


@pytest.fixture
def running_job(alice, catalog) -> Job:
    now = timezone.now()
    job = make_job(
        alice,
        name="mixed run",
        status=JobStatus.RUNNING,
        plan=PLAN,
        epoch=1,
        step=50,
        loss=2.5,
        first_loss=6.2,
        tokens_per_s=1_024.0,
        started_at=now,
    )
    record_event(job, JobEventKind.PLACED, "Placed on 1 × rtx-4090 + 1 × tpu-v5e")
    for step in (49, 50):
        for index, speed in enumerate((400.0, 624.0)):
            JobMetric.objects.create(
                job=job, epoch=1, rank=index, step=step, loss=2.5, tokens_per_s=speed, created_at=now
            )
    JobLogLine.objects.create(job=job, epoch=1, rank=1, line="step 50 loss 2.5000", created_at=now)
    return job


# The launch page and its live quote


def test_the_launch_page_asks_for_a_login(client):
    response = client.get(reverse("train"))
    assert response.status_code == 302
    assert reverse("account_login") in response.url


def test_the_launch_page_renders_the_form_with_the_articles_defaults(alice_client, catalog):
    html = alice_client.get(reverse("train")).content.decode()
    assert f'hx-post="{reverse("train_quote")}"' in html
    assert 'hx-trigger="input changed delay:400ms, load"' in html
    assert '<option value="llama-tiny" selected>' in html
    assert 'name="max_budget" value="28"' in html
    assert 'name="chips_rtx-4090"' in html
    assert reverse("datasets") in html


def test_the_quote_shows_a_plan_for_llama_tiny(alice_client, seeded_nodes_online):
    html = quote_html(alice_client)
    assert 'data-testid="quote"' in html
    assert "ZeRO stage" in html
    assert "tokens/s" in html
    assert 'data-testid="quote-price">¥' in html
    assert 'data-testid="quote-total">¥' in html
    assert "simulated" in html


def test_the_quote_compares_the_mix_with_the_best_single_chip_type(alice_client, seeded_nodes_online):
    html = quote_html(alice_client)
    assert 'data-testid="quote-baseline"' in html
    assert "single chip type" in html


def test_the_quote_follows_chips_picked_by_hand(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, **{"chips_ascend-910b": "2"})
    chips = html[html.index('data-testid="quote-chips"') :]
    assert "2 ×" in chips
    assert "Huawei Ascend 910B" in chips
    assert "NVIDIA RTX 4090" not in chips[: chips.index("</ul>")]


def test_the_quote_names_a_budget_that_is_too_low(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, max_budget="0.01")
    assert 'data-testid="quote-problem"' in html
    assert "Budget too low" in html
    assert "¥0.01/h" in html


def test_the_quote_says_when_the_model_does_not_fit_the_free_chips(alice_client, catalog):
    bring_online("rtx-4090")
    html = quote_html(alice_client, model="llama-2-70b")
    assert "Model does not fit" in html
    assert "llama-2-70b" in html


def occupy_the_fleet(owner) -> None:
    """Every chip of the online fleet is held by another job: nothing is free, but chips exist."""
    busy = Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1_000_000
    )
    now = timezone.now()
    for node in Node.objects.filter(agent_status=AgentStatus.ONLINE).select_related("pool"):
        Allocation.objects.create(
            job=busy,
            node=node,
            chip_type=node.pool.chip_type,
            chips=node.chips,
            epoch=1,
            started_at=now,
            billed_through=now,
        )


def test_the_quote_without_free_chips_says_the_job_can_still_queue(alice_client, bob, seeded_nodes_online):
    occupy_the_fleet(bob)
    html = quote_html(alice_client)
    assert "No free chips" in html
    assert "waits in the queue" in html


def test_the_quote_says_when_the_fleet_could_never_place_the_job(alice_client, catalog):
    html = quote_html(alice_client)  # no node is online
    assert "No capacity" in html and "could never be placed" in html
    assert "waits in the queue" not in html


def test_the_quote_names_the_field_of_invalid_input(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, max_steps="0")
    assert "Check the form" in html
    assert "Max steps: Ensure this value is greater than or equal to 1." in html


# Launching


def test_training_queues_a_job_and_opens_its_page(alice_client, alice, seeded_nodes_online):
    response = launch(alice_client, name="first run")
    job = Job.objects.get(owner=alice)
    assert response.status_code == 302
    assert response.url == reverse("job", args=[job.pk])
    assert job.status == JobStatus.QUEUED
    assert (job.model_name, job.max_steps, job.per_device_batch_size) == ("llama-tiny", 200, 4)
    assert job.max_budget_per_hour == 28_000_000
    assert job.name == "first run"
    assert job.events.filter(kind=JobEventKind.QUEUED).exists()


def test_a_launch_the_balance_cannot_hold_is_refused_with_the_amounts(client, bob, seeded_nodes_online):
    client.force_login(bob)  # bob has no credit
    response = launch(client)
    assert response.status_code == 200
    assert "Your balance is ¥0.00" in response.content.decode()
    assert not Job.objects.filter(owner=bob).exists()


def test_chips_picked_by_hand_are_kept_on_the_job(alice_client, alice, seeded_nodes_online):
    launch(alice_client, **{"chips_rtx-4090": "2", "chips_tpu-v5e": ""})
    assert Job.objects.get(owner=alice).chip_counts == {"rtx-4090": 2}


def test_a_job_without_free_chips_is_still_queued(alice_client, alice, bob, seeded_nodes_online):
    occupy_the_fleet(bob)
    response = launch(alice_client)
    assert response.status_code == 302
    assert Job.objects.get(owner=alice).status == JobStatus.QUEUED


def test_zero_steps_is_refused_naming_the_field(alice_client, seeded_nodes_online):
    response = launch(alice_client, max_steps="0")
    assert response.status_code == 200
    assert "Max steps: Ensure this value is greater than or equal to 1." in response.content.decode()
    assert not Job.objects.exists()


def test_an_unknown_model_is_refused_naming_the_field(alice_client, seeded_nodes_online):
    html = launch(alice_client, model="gpt-9").content.decode()
    assert "Model: Unknown model &#x27;gpt-9&#x27;" in html
    assert not Job.objects.exists()


def test_someone_elses_dataset_is_refused(alice_client, bob, seeded_nodes_online):
    theirs = Dataset.objects.create(
        owner=bob,
        name="secret",
        kind="text",
        store_prefix=f"datasets/{bob.pk}/x",
        file_name="data.txt",
        size_bytes=1,
        samples=1,
    )
    html = launch(alice_client, dataset=theirs.reference).content.decode()
    assert "Dataset: Unknown dataset" in html
    assert not Job.objects.exists()


def test_a_budget_below_the_cheapest_plan_is_refused_on_the_budget_field(alice_client, seeded_nodes_online):
    html = launch(alice_client, max_budget="0.01").content.decode()
    assert "Hourly budget (¥): Budget too low" in html
    assert not Job.objects.exists()


def test_a_model_that_fits_no_chip_is_refused_on_the_model_field(alice_client, catalog):
    bring_online("rtx-4090")
    html = launch(alice_client, model="llama-2-70b").content.decode()
    assert "Model: Model does not fit" in html
    assert not Job.objects.exists()


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


# Datasets


def upload(client, name: str, content: bytes):
    return client.post(reverse("datasets"), {"file": SimpleUploadedFile(name, content), "name": ""})


def test_uploading_a_text_dataset_lists_its_reference(alice_client, alice):
    response = upload(alice_client, "poems.txt", b"roses are red\nviolets are blue\n")
    dataset = Dataset.objects.get(owner=alice)
    assert response.status_code == 302
    assert (dataset.name, dataset.samples) == ("poems.txt", 2)
    html = alice_client.get(reverse("datasets")).content.decode()
    assert f"upload:{dataset.pk}" in html
    assert f"{reverse('train')}?dataset=upload%3A{dataset.pk}" in html


def test_an_empty_dataset_is_refused_naming_the_problem(alice_client):
    html = upload(alice_client, "empty.txt", b"").content.decode()
    assert "File: Dataset is empty." in html
    assert not Dataset.objects.exists()


def test_a_binary_dataset_is_refused_naming_the_problem(alice_client):
    html = upload(alice_client, "weights.txt", b"\x00\x01\x02binary").content.decode()
    assert "File: Dataset looks binary" in html
    assert not Dataset.objects.exists()


def test_the_upload_form_lists_every_kind_of_dataset_it_takes(alice_client):
    help_text = unescape(alice_client.get(reverse("datasets")).content.decode()).split('id="id_file_helptext">')[1]

    for kind in ("plain text", "{“text”}", "{“messages”: [{“role”, “content”}, …]}", "{“prompt”, “completion”}"):
        assert kind in help_text.split("</p>")[0]


def test_my_datasets_are_offered_on_the_launch_page(alice_client, alice, catalog):
    upload(alice_client, "corpus.jsonl", b'{"text": "hello"}\n')
    dataset = Dataset.objects.get(owner=alice)
    html = alice_client.get(reverse("train"), {"dataset": dataset.reference}).content.decode()
    assert f'<option value="{dataset.reference}" selected>' in html


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
