"""The job page's artifacts, events and logs, and the jobs list's cost and actions (issue #14, items 7 and 8).

Artifacts: the final model first, checkpoints collapsed and numbered by step. Events: runs of checkpoints
folded. Jobs list: the cost so far in a fixed number of queries, Re-run through the API's validation, Cancel
from the row. (The logs: test_job_logs.py.)
"""

from __future__ import annotations

import io
import re
import tarfile
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobEventKind, JobStatus
from fleet.models import Allocation, Job, Node
from tests.support.lines import bill_as_charged
from tests.support.portal_pages import page
from tests.support.stored import stored_checkpoint
from workers.models import JobEvent
from workers.services.artifacts import Artifact, group_artifacts
from workers.services.events import READ_BATCH, record_event, timeline

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


def make_job(owner, **fields) -> Job:
    spec = {"model_name": "llama-tiny", "per_device_batch_size": 4, "max_steps": 240, "max_budget_per_hour": 28_000_000}
    return Job.objects.create(owner=owner, **{**spec, **fields})


# Artifacts


def artifact(path: str, kind: str = "checkpoint", size: int = 10) -> Artifact:
    return Artifact(path, size, kind)


def test_artifacts_are_grouped_final_model_first_and_checkpoints_newest_first_by_number():
    groups = group_artifacts(
        [
            artifact("step-100/meta.json"),
            artifact("step-20/meta.json"),
            artifact("step-240/model/model.safetensors", "final model", 1000),
            artifact("step-240/model/config.json", "final model", 5),
            artifact("step-240/meta.json"),
            artifact("step-20/universal/mp_rank_10.pt"),
            artifact("step-20/universal/mp_rank_2.pt"),
        ]
    )
    assert [a.path for a in groups.final_model] == ["step-240/model/config.json", "step-240/model/model.safetensors"]
    assert (groups.final_step, groups.final_size_bytes) == (240, 1005)
    assert [c.step for c in groups.checkpoints] == [240, 100, 20]  # as text, "step-20" sorts after "step-100"
    assert [a.path for a in groups.checkpoints[2].files] == [
        "step-20/meta.json",
        "step-20/universal/mp_rank_2.pt",
        "step-20/universal/mp_rank_10.pt",
    ]
    assert groups.other == []


def test_names_with_digits_that_are_not_numbers_sort_without_error():
    groups = group_artifacts([artifact("logs/x1²"), artifact("logs/²"), artifact("logs/x10"), artifact("logs/x2")])
    assert [a.path for a in groups.other] == ["logs/x1²", "logs/x2", "logs/x10", "logs/²"]


def test_the_job_page_shows_the_final_model_first_with_one_download_and_the_checkpoints_collapsed(
    alice_client, alice, tmp_path
):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    for step in (20, 100, 120):
        stored_checkpoint(job.pk, step, {"meta.json": b"{}", "ds/mp_rank_00.pt": b"state"}, tmp_path)
    final = stored_checkpoint(
        job.pk, 240, {"meta.json": b"{}", "model/config.json": b"{}", "model/model.safetensors": b"w" * 2048}, tmp_path
    )
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=final, latest_checkpoint_step=240)

    html = page(alice_client, job)
    section = html[html.index('id="job-artifacts"') :]
    model_at = section.index('data-testid="model-download"')
    checkpoints_at = section.index('data-testid="checkpoints"')
    assert model_at < checkpoints_at
    assert "Final model · step 240" in section
    assert section.count(reverse("job_model", args=[job.pk]) + '"') == 1  # one download: the whole model
    assert "4 checkpoints" in section
    checkpoints_tag = section[section.rindex("<details", 0, checkpoints_at) :].split(">", 1)[0]
    assert re.search(r"\sopen[\s>=]", checkpoints_tag + ">") is None  # collapsed
    steps = [int(chunk.split('"', 1)[0]) for chunk in section.split('data-step="')[1:]]
    assert steps == [240, 120, 100, 20]
    assert reverse("job_artifact", args=[job.pk, "step-20/ds/mp_rank_00.pt"]) in section


def downloaded_folders(client, job: Job, **params) -> set[str]:
    """The top folders of the model tar the job page's Download button sends."""
    response = client.get(reverse("job_model", args=[job.pk]), params)
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
        return {name.split("/", 1)[0] for name in archive.getnames()}


def snippet(html: str, testid: str) -> str:
    """The text of a code snippet on the page, as the Copy button copies it."""
    start = html.index(f'data-testid="{testid}"')
    return unescape(html[html.index("<code", start) : html.index("</code>", start)].split(">", 1)[1])


def test_the_load_lines_name_the_folder_the_download_unpacks_to_one_per_line_with_a_copy_button(
    alice_client, alice, tmp_path
):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    final = stored_checkpoint(job.pk, 240, {"model/config.json": b"{}", "model/model.safetensors": b"w"}, tmp_path)
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=final, latest_checkpoint_step=240)

    html = page(alice_client, job)
    lines = snippet(html, "load-lines").splitlines()

    [folder] = downloaded_folders(alice_client, job)
    assert folder == f"job-{job.pk}-model"
    assert lines[0] == "from transformers import AutoModelForCausalLM, AutoTokenizer"
    assert lines[1] == f'model = AutoModelForCausalLM.from_pretrained("./{folder}")'
    assert 'data-copy="#load-lines"' in html and 'id="load-lines"' in html


def test_a_lora_jobs_load_lines_name_the_adapter_and_merged_folders_the_downloads_unpack_to(
    alice_client, alice, tmp_path
):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now(), mode="lora", lora={"r": 8})
    files = {}
    for folder, name in (("model", "model.safetensors"), ("adapter", "adapter_model.safetensors")):
        files |= {f"{folder}/config.json": b"{}", f"{folder}/{name}": b"weights"}
    final = stored_checkpoint(job.pk, job.max_steps, files, tmp_path)
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=final, latest_checkpoint_step=job.max_steps)

    html = page(alice_client, job)

    [adapter] = downloaded_folders(alice_client, job)
    [merged] = downloaded_folders(alice_client, job, merged="1")
    assert f'"./{adapter}")' in snippet(html, "load-lines")
    assert f'AutoModelForCausalLM.from_pretrained("./{merged}")' in snippet(html, "load-merged-lines")
    assert 'data-copy="#load-merged-lines"' in html


@pytest.mark.parametrize(
    ("status", "label"), [(JobStatus.RUNNING, "Cost so far"), (JobStatus.SUCCEEDED, "Cost"), (JobStatus.FAILED, "Cost")]
)
def test_the_cost_is_cost_so_far_while_the_job_runs_and_cost_once_it_has_ended(alice_client, alice, status, label):
    job = make_job(alice, status=status)
    html = page(alice_client, job)
    assert f"<dt>{label}</dt>" in html and html.count("<dt>Cost") == 1


def test_the_job_page_shows_the_held_out_loss(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING, eval_every=20, eval_fraction=0.1)
    assert re.search(r'data-testid="eval-loss">—<', page(alice_client, job))  # none measured yet

    Job.objects.filter(pk=job.pk).update(eval_loss=2.34567)

    assert 'data-testid="eval-loss">2.3457<' in page(alice_client, job)


# Events


def checkpoint_events(job: Job, steps, start) -> None:
    JobEvent.objects.bulk_create(
        JobEvent(
            job=job,
            kind=JobEventKind.CHECKPOINTED,
            message=f"Checkpoint at step {step}",
            data={"path": f"store:checkpoints/job-{job.pk}/step-{step}"},
            created_at=start + timedelta(seconds=index),
        )
        for index, step in enumerate(steps)
    )


def test_consecutive_checkpoint_events_are_folded_into_one_line(alice):
    job = make_job(alice)
    start = timezone.now() - timedelta(hours=1)
    record_event(job, JobEventKind.PLACED, "Placed on 1 × rtx-4090", now=start)
    checkpoint_events(job, range(20, 260, 20), start + timedelta(seconds=1))
    record_event(job, JobEventKind.NOTICE, "Outbid", now=start + timedelta(minutes=1))
    checkpoint_events(job, [250], start + timedelta(minutes=2))
    record_event(job, JobEventKind.SUCCEEDED, "Done", now=start + timedelta(minutes=3))

    entries = timeline(job).entries
    assert [(e.label, e.message, e.count) for e in entries] == [
        ("Succeeded", "Done", 1),
        ("Checkpointed", "Checkpoint at step 250", 1),  # a lone checkpoint stays as it was
        ("Notice", "Outbid", 1),
        ("Checkpoints", "Checkpoint saved ×12, last at step 240", 12),
        ("Placed", "Placed on 1 × rtx-4090", 1),
    ]
    assert timeline(job).total_events == 16 and not timeline(job).truncated


def test_a_flood_of_checkpoints_is_counted_in_a_few_queries_and_the_timeline_says_what_it_left_out(
    alice, django_assert_max_num_queries
):
    job = make_job(alice)
    start = timezone.now() - timedelta(hours=2)
    for minute in range(3):
        record_event(job, JobEventKind.PLACED, f"Placed {minute}", now=start + timedelta(minutes=minute))
    checkpoint_events(job, range(1, 3 * READ_BATCH + 2), start + timedelta(minutes=5))

    with django_assert_max_num_queries(6):
        folded = timeline(job)
    assert folded.entries[0].message == f"Checkpoint saved ×{3 * READ_BATCH + 1}, last at step {3 * READ_BATCH + 1}"
    assert [e.message for e in folded.entries[1:]] == ["Placed 2", "Placed 1", "Placed 0"]
    assert not folded.truncated

    short = timeline(job, limit=2)
    assert [e.count for e in short.entries] == [3 * READ_BATCH + 1, 1]
    assert short.truncated and short.total_events == 3 * READ_BATCH + 4


def test_the_job_page_shows_the_folded_checkpoints(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    checkpoint_events(job, [20, 40, 60], timezone.now())
    html = page(alice_client, job)
    assert "Checkpoint saved ×3, last at step 60" in html
    assert 'data-folded="3"' in html


# Cancel, on the job page and in the list


def test_cancel_through_htmx_leaves_the_poller_to_its_own_next_answer(alice_client, alice):
    job = make_job(alice)
    cancelled = alice_client.post(reverse("job_cancel", args=[job.pk]), headers={"HX-Request": "true"})
    assert "Cancelled" in cancelled.content.decode() and "job-poller" not in cancelled.content.decode()
    poll = alice_client.get(reverse("job_live", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    poller = poll[poll.index('id="job-poller"') :]
    assert 'hx-swap-oob="true"' in poller and "hx-trigger" not in poller


def test_the_cancel_form_survives_the_live_swaps(alice_client, alice):
    html = page(alice_client, make_job(alice, status=JobStatus.RUNNING))
    assert '<form id="job-cancel" hx-preserve="true"' in html


def test_cancel_from_the_jobs_list_goes_back_to_the_list(alice_client, alice):
    job = make_job(alice)
    response = alice_client.post(reverse("job_cancel", args=[job.pk]), {"next": "jobs"})
    assert response.status_code == 302 and response.url == reverse("jobs")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    htmx = alice_client.post(reverse("job_cancel", args=[job.pk]), {"next": "jobs"}, headers={"HX-Request": "true"})
    assert htmx["HX-Redirect"] == reverse("jobs")


def test_the_jobs_list_offers_cancel_only_for_unfinished_jobs(alice_client, alice):
    running = make_job(alice, status=JobStatus.RUNNING)
    done = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    html = alice_client.get(reverse("jobs")).content.decode()
    row = lambda job: html[html.index(f'data-job="{job.pk}"') :].split("</tr>", 1)[0]  # noqa: E731
    assert reverse("job_cancel", args=[running.pk]) in row(running) and 'name="csrfmiddlewaretoken"' in row(running)
    assert reverse("job_cancel", args=[done.pk]) not in row(done)
    assert reverse("job_rerun", args=[done.pk]) in row(done) and reverse("job_rerun", args=[running.pk]) in row(running)


# Re-run


def test_rerun_launches_a_copy_with_the_same_settings(alice_client, alice, seeded_nodes_online):
    original = make_job(
        alice,
        name="lora run",
        status=JobStatus.SUCCEEDED,
        finished_at=timezone.now(),
        mode="lora",
        lora={"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]},
        seq_len=64,
        max_steps=120,
        total_budget=50_000_000,
        spot=True,
        spot_bid_per_hour=1_234_567,
        allow_on_demand=False,
        chip_counts={"rtx-4090": 1},
    )
    response = alice_client.post(reverse("job_rerun", args=[original.pk]))
    copy = Job.objects.exclude(pk=original.pk).get(owner=alice)
    assert response.status_code == 302 and response.url == reverse("job", args=[copy.pk])
    assert copy.status == JobStatus.QUEUED
    same = ["name", "model_name", "mode", "lora", "seq_len", "max_steps", "total_budget", "spot", "spot_bid_per_hour"]
    same += ["allow_on_demand", "chip_counts", "per_device_batch_size", "max_budget_per_hour", "policy", "dataset"]
    assert {name: getattr(copy, name) for name in same} == {name: getattr(original, name) for name in same}


def test_rerun_through_htmx_opens_the_new_job(alice_client, alice, seeded_nodes_online):
    original = make_job(alice, status=JobStatus.FAILED, finished_at=timezone.now())
    response = alice_client.post(reverse("job_rerun", args=[original.pk]), headers={"HX-Request": "true"})
    copy = Job.objects.exclude(pk=original.pk).get(owner=alice)
    assert response["HX-Redirect"] == reverse("job", args=[copy.pk])


def test_a_rerun_the_api_would_refuse_creates_nothing_and_says_why(alice_client, alice, seeded_nodes_online):
    original = make_job(alice, dataset="upload:999999", dataset_upload_id=None, status=JobStatus.FAILED)
    response = alice_client.post(reverse("job_rerun", args=[original.pk]), follow=True)
    assert Job.objects.filter(owner=alice).count() == 1
    assert "can&#x27;t be run again as it was: dataset: Unknown dataset" in response.content.decode()


# The jobs list


def charge(job: Job, micros: int) -> None:
    node = Node.objects.select_related("pool").first()
    now = timezone.now()
    allocation = Allocation.objects.create(
        job=job, node=node, chip_type=node.pool.chip_type, chips=1, epoch=1, started_at=now, billed_through=now,
    )  # fmt: skip
    bill_as_charged(allocation, micros)


def test_the_jobs_list_shows_each_jobs_cost_so_far(alice_client, alice, catalog):
    paid, free = make_job(alice, status=JobStatus.RUNNING), make_job(alice)
    charge(paid, 1_250_000)
    charge(paid, 500_000)
    html = alice_client.get(reverse("jobs")).content.decode()
    cost = lambda job: html[html.index(f'data-job="{job.pk}"') :].split('data-testid="job-cost">', 1)[1][:120]  # noqa: E731
    assert "¥1.75" in cost(paid)
    assert "¥0.00" in cost(free)


def test_the_jobs_list_costs_the_same_queries_for_many_jobs(
    alice_client, alice, catalog, django_assert_max_num_queries
):
    for _ in range(3):
        charge(make_job(alice, status=JobStatus.RUNNING), 1_000)
    alice_client.get(reverse("jobs"))  # warm the session and the user
    with django_assert_max_num_queries(12) as few:
        alice_client.get(reverse("jobs"))
    for _ in range(17):
        charge(make_job(alice, status=JobStatus.RUNNING), 1_000)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert alice_client.get(reverse("jobs")).status_code == 200


def test_the_launch_message_names_no_status_that_would_go_stale_on_the_live_page(alice_client, seeded_nodes_online):
    from tests.support.portal_pages import LAUNCH

    html = alice_client.post(reverse("train"), LAUNCH, follow=True).content.decode()
    assert "submitted: its status below follows it live" in html
    assert "is queued" not in html
