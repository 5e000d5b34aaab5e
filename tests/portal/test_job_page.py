"""The job page's artifacts, events and logs, and the jobs list's cost and actions (issue #14, items 7 and 8).

Artifacts: the final model first, checkpoints collapsed and numbered by step. Events: runs of checkpoints
folded. Logs: paged by line id, followed by cursor, searched on the server (page and API). Jobs list: the cost
so far in a fixed number of queries, Re-run through the API's validation, Cancel from the row.
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
from tests.support.accounts import token_client
from tests.support.lines import bill_as_charged
from tests.support.stored import stored_checkpoint
from workers.models import JobEvent, JobLogLine
from workers.services.artifacts import Artifact, group_artifacts
from workers.services.events import READ_BATCH, record_event, timeline
from workers.services.job_logs import PAGE_LINES

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


def make_job(owner, **fields) -> Job:
    spec = {"model_name": "llama-tiny", "per_device_batch_size": 4, "max_steps": 240, "max_budget_per_hour": 28_000_000}
    return Job.objects.create(owner=owner, **{**spec, **fields})


def page(client, job: Job, **params) -> str:
    response = client.get(reverse("job", args=[job.pk]), params)
    assert response.status_code == 200
    return response.content.decode()


def log_view(client, job: Job, **params):
    return client.get(reverse("job_logs", args=[job.pk]), params)


def add_lines(job: Job, texts: list[str]) -> list[JobLogLine]:
    now = timezone.now()
    return JobLogLine.objects.bulk_create(
        JobLogLine(job=job, epoch=1, rank=index % 2, line=text, created_at=now) for index, text in enumerate(texts)
    )


def shown_lines(html: str) -> list[str]:
    """The line ids of the log view, in order."""
    return [chunk.split('"', 1)[0] for chunk in html.split('data-line="')[1:]]


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


# Logs on the page


def test_the_job_page_shows_the_newest_page_of_logs_and_follows_it(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    lines = add_lines(job, [f"step {index}" for index in range(PAGE_LINES + 50)])
    html = page(alice_client, job)
    ids = shown_lines(html)
    assert ids == [str(line.pk) for line in lines[-PAGE_LINES:]]
    assert f"{PAGE_LINES + 50} lines" in html and "followed live" in html
    assert f"?since={lines[-1].pk}" in html and 'hx-target="#job-log-lines"' in html
    assert f"before={lines[50].pk}" in html  # the older page starts below the first line shown
    assert 'data-testid="log-newer"' not in html


def test_older_and_newer_pages_by_line_id(alice_client, alice):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    lines = add_lines(job, [f"line {index}" for index in range(PAGE_LINES * 2 + 10)])

    older = log_view(alice_client, job, before=lines[PAGE_LINES + 10].pk).content.decode()
    assert shown_lines(older) == [str(line.pk) for line in lines[10 : PAGE_LINES + 10]]
    assert 'data-testid="log-older"' in older and 'data-testid="log-newer"' in older
    assert f"after={lines[PAGE_LINES + 9].pk}" in older
    assert "job-log-follower" not in older  # a page the reader chose stays put

    oldest = log_view(alice_client, job, before=lines[10].pk).content.decode()
    assert shown_lines(oldest) == [str(line.pk) for line in lines[:10]]
    assert 'data-testid="log-older"' not in oldest

    newer = log_view(alice_client, job, after=lines[PAGE_LINES + 9].pk).content.decode()
    assert shown_lines(newer) == [str(line.pk) for line in lines[PAGE_LINES + 10 :]]
    assert 'data-testid="log-newer"' not in newer

    # The same pages work without script: the job page takes the same parameters.
    assert shown_lines(page(alice_client, job, before=lines[10].pk)) == [str(line.pk) for line in lines[:10]]


def test_following_brings_only_the_lines_after_the_cursor(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    first = add_lines(job, ["booting", "step 1"])
    newer = add_lines(job, ["step 2", "step 3"])

    html = log_view(alice_client, job, since=first[-1].pk).content.decode()
    assert shown_lines(html) == [str(line.pk) for line in newer]
    assert f'data-cursor="{newer[-1].pk}"' in html and 'hx-swap-oob="true"' in html and "every 2s" in html
    assert "4 lines" in html  # the summary's count, brought up to date

    quiet = log_view(alice_client, job, since=newer[-1].pk).content.decode()
    assert shown_lines(quiet) == [] and "every 2s" in quiet and "job-log-summary" not in quiet


def test_following_stops_once_the_job_has_ended_and_nothing_is_left(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    lines = add_lines(job, ["last words"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    assert "every 2s" in log_view(alice_client, job, since=0).content.decode()  # the last lines still come
    done = log_view(alice_client, job, since=lines[-1].pk).content.decode()
    assert "job-log-follower" in done and "every 2s" not in done


def test_the_log_search_is_case_insensitive_literal_escaped_and_highlighted(alice_client, alice):
    job = make_job(alice, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    lines = add_lines(
        job,
        [
            "CUDA Error: out of memory",
            "all fine",
            "100% done <script>alert(1)</script>",
            "1000 done",
            "cuda error again",
        ],
    )

    html = log_view(alice_client, job, search="cuda error").content.decode()
    assert shown_lines(html) == [str(lines[0].pk), str(lines[4].pk)]
    assert "<mark>CUDA Error</mark>: out of memory" in html and "<mark>cuda error</mark> again" in html
    assert "2 lines containing “cuda error”" in html

    percent = log_view(alice_client, job, search="0%").content.decode()
    assert shown_lines(percent) == [str(lines[2].pk)]  # "%" is a character here, not a wildcard
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in percent and "<script>alert" not in percent

    assert (
        "No line contains “nothing like this”"
        in log_view(alice_client, job, search="nothing like this").content.decode()
    )


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"search": "x" * 201}, "200 characters"),
        ({"search": "a\x00b"}, "null character"),
        ({"before": "abc"}, "before must be a line id"),
        ({"after": "-1"}, "after must be a line id"),
        ({"since": "1e3"}, "since must be a line id"),
        ({"before": "5", "after": "2"}, "not both"),
    ],
)
def test_bad_log_parameters_are_refused_naming_the_problem(alice_client, alice, params, named):
    job = make_job(alice)
    response = log_view(alice_client, job, **params)
    assert response.status_code == 400 and named.lower() in response.content.decode().lower()
    if "since" not in params:
        assert alice_client.get(reverse("job", args=[job.pk]), params).status_code == 400


def test_another_users_logs_are_not_found(client, bob, alice):
    job = make_job(alice)
    client.force_login(bob)
    assert log_view(client, job).status_code == 404
    assert client.post(reverse("job_rerun", args=[job.pk])).status_code == 404


# Logs in the API


NOISY_LOG = [
    "rank 0/2 on cpu: fresh start; ready in 3.10 s",
    "<site-packages>/torch/utils/checkpoint.py:86: UserWarning: None of the inputs have requires_grad=True.",
    "  warnings.warn(",
    "[2026-12-05 02:58:00,123] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cpu",
    "[W1205 02:58:00.123456 ProcessGroupGloo.cpp:716] Warning: Unable to resolve hostname",
    "step 1/200 · loss 6.2545 · 620 tokens/s · 0.83 s/step",
    "Loading checkpoint shards: 100%|██████████| 2/2 [00:00<00:00, 12.1it/s]",
    "step 50/200 · loss 2.5000 · 4,952 tokens/s · 0.10 s/step",
]


def noisy_log(job: Job) -> list[JobLogLine]:
    now = timezone.now()
    return JobLogLine.objects.bulk_create(
        JobLogLine(job=job, epoch=1, rank=0, line=text, created_at=now) for text in NOISY_LOG
    )


def test_library_warnings_and_progress_bars_are_folded_away_and_the_step_lines_stay_in_view(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    noisy_log(job)

    html = page(alice_client, job)
    view = html[html.index('id="job-log-lines"') : html.index('id="job-log-follower"')]

    folds = re.findall(r'<details class="log-fold"[^>]*><summary>([^<]*)</summary>(.*?)</details>', view, re.S)
    assert [summary for summary, _ in folds] == [
        "4 library lines: warnings, progress",
        "1 library line: warnings, progress",
    ]
    folded = "".join(lines for _, lines in folds)
    assert "UserWarning" in folded and "warnings.warn(" in folded and "ds_accelerator" in folded
    assert "Loading checkpoint shards" in folded
    outside = re.sub(r"<details.*?</details>", "", view, flags=re.S)
    assert "step 1/200 · loss 6.2545" in outside and "step 50/200 · loss 2.5000" in outside
    assert "fresh start" in outside and len(shown_lines(view)) == len(NOISY_LOG)


def test_a_search_shows_its_matches_unfolded(alice_client, alice):
    job = make_job(alice, status=JobStatus.RUNNING)
    noisy_log(job)
    html = page(alice_client, job, search="warning")
    assert "log-fold" not in html and "<mark>Warning</mark>" in html


def test_the_logs_api_says_which_lines_are_a_librarys(alice):
    job = make_job(alice)
    noisy_log(job)
    rows = token_client(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert [row["line"] for row in rows if not row["library"]] == [
        NOISY_LOG[0], NOISY_LOG[2], NOISY_LOG[5], NOISY_LOG[7]
    ]  # fmt: skip


def test_the_logs_api_searches_and_pages_backwards(alice):
    job = make_job(alice)
    lines = add_lines(job, ["Loss 2.0", "loss 1.5", "eval", "LOSS 1.0", "done"])
    api = token_client(alice)
    url = f"/api/v1/jobs/{job.pk}/logs/"

    assert [row["line"] for row in api.get(url, {"search": "loss"}).json()] == ["Loss 2.0", "loss 1.5", "LOSS 1.0"]
    assert [row["line"] for row in api.get(url, {"search": "loss", "after": lines[1].pk}).json()] == ["LOSS 1.0"]
    assert [row["line"] for row in api.get(url, {"before": lines[3].pk, "limit": 2}).json()] == ["loss 1.5", "eval"]
    assert [row["line"] for row in api.get(url, {"tail": "true", "limit": 2}).json()] == ["LOSS 1.0", "done"]
    assert [row["line"] for row in api.get(url).json()][:2] == ["Loss 2.0", "loss 1.5"]  # as before: oldest first


@pytest.mark.parametrize(
    ("params", "field"),
    [({"search": "y" * 201}, "search"), ({"before": "x"}, "before"), ({"after": 3, "before": 9}, "before")],
)
def test_the_logs_api_refuses_bad_parameters_naming_the_field(alice, params, field):
    job = make_job(alice)
    response = token_client(alice).get(f"/api/v1/jobs/{job.pk}/logs/", params)
    assert response.status_code == 400
    assert field in response.json()["errors"]


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
    from tests.portal.test_training_pages import LAUNCH

    html = alice_client.post(reverse("train"), LAUNCH, follow=True).content.decode()
    assert "submitted: its status below follows it live" in html
    assert "is queued" not in html
