"""The job page's logs (issue #14, item 8): paged by line id, followed by cursor, searched on the server, libraries'
noise folded away; and the same in the API."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.accounts import token_client
from tests.support.portal_pages import make_job, page
from workers.models import JobLogLine
from workers.services.job_logs import PAGE_LINES

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


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
