"""The job page in a real browser, on a desktop and a phone: the final model first and the checkpoints collapsed,
the logs paged, searched and followed, the checkpoint events folded, and a cancel that leaves no error in the
console even when it crosses a live poll. Jobs, logs, events and checkpoints are written to the database and
the store directly; no Celery, no agent."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from tests.support.accounts import PASSWORD
from tests.support.portal_pages import PLAN
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobEvent, JobLogLine
from workers.services.events import record_event
from workers.services.job_logs import PAGE_LINES

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


def make_job(owner, **fields) -> Job:
    spec = {"model_name": "llama-tiny", "per_device_batch_size": 4, "max_steps": 240, "max_budget_per_hour": 28_000_000}
    return Job.objects.create(owner=owner, **{**spec, **fields})


def trained_job(owner, scratch) -> Job:
    """A running job with 450 log lines, a placement, 12 checkpoints saved (events and trees) and a final model."""
    now = timezone.now() - timedelta(minutes=30)
    job = make_job(owner, name="browser run", status=JobStatus.RUNNING, plan=PLAN, epoch=1, step=240, started_at=now)
    record_event(job, JobEventKind.PLACED, "Placed on 1 × rtx-4090 + 1 × tpu-v5e", now=now)
    steps = range(20, 260, 20)
    JobEvent.objects.bulk_create(
        JobEvent(
            job=job,
            kind=JobEventKind.CHECKPOINTED,
            message=f"Checkpoint at step {step}",
            created_at=now + timedelta(seconds=step),
        )
        for step in steps
    )
    texts = [f"step {index} loss {3 - index / 300:.4f}" for index in range(450)]
    texts[7] = "RuntimeError: CUDA error: out of memory"
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, epoch=1, rank=index % 2, line=text, created_at=now + timedelta(seconds=index))
        for index, text in enumerate(texts)
    )
    for step in steps[:-1]:
        stored_checkpoint(job.pk, step, {"meta.json": b"{}", "ds/mp_rank_00.pt": b"state"}, scratch)
    final = stored_checkpoint(
        job.pk, 240, {"meta.json": b"{}", "model/config.json": b"{}", "model/model.safetensors": b"w" * 4096}, scratch
    )
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=final, latest_checkpoint_step=240)
    return job


def open_page(chromium: Browser, url: str, viewport: dict) -> tuple[Page, list[str]]:
    """A logged-in page of alice's, and the console errors and page errors it collects from now on."""
    context = chromium.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    expect(page).to_have_url(f"{url}/dashboard/")
    return page, problems


def line_ids(page: Page) -> list[int]:
    return [
        int(value)
        for value in page.eval_on_selector_all("#job-log-lines .log-line", "ls => ls.map(l => l.dataset.line)")
    ]


@pytest.mark.parametrize("size", VIEWPORTS)
def test_artifacts_logs_and_events_on_the_job_page(live_server, alice, chromium, screenshots, tmp_path, size):
    job = trained_job(alice, tmp_path)
    lines = list(job.log_lines.order_by("id").values_list("id", flat=True))
    page, problems = open_page(chromium, live_server.url, VIEWPORTS[size])
    page.goto(f"{live_server.url}/jobs/{job.pk}/")

    # Artifacts: the final model, with its one download, above the collapsed checkpoints, newest first.
    model = page.get_by_test_id("model-download")
    checkpoints = page.locator("details[data-testid=checkpoints]")
    expect(model.get_by_test_id("download-model")).to_be_visible()
    expect(checkpoints.locator("summary").first).to_contain_text("12 checkpoints")
    assert model.bounding_box()["y"] < checkpoints.bounding_box()["y"]
    assert checkpoints.evaluate("d => d.open") is False
    expect(checkpoints.locator("li[data-step]").first).to_be_hidden()
    checkpoints.locator("summary").first.click()
    steps = checkpoints.locator("li[data-step]").evaluate_all("ls => ls.map(l => Number(l.dataset.step))")
    assert steps == sorted(steps, reverse=True) and steps[:3] == [240, 220, 200]
    with page.expect_response(lambda response: "/live/" in response.url):
        pass  # a live swap of the section keeps it open
    assert checkpoints.evaluate("d => d.open") is True

    # The lines that load the model read as three lines, and Copy copies the three.
    snippet = model.get_by_test_id("load-lines")
    loads = f'model = AutoModelForCausalLM.from_pretrained("./job-{job.pk}-model")'
    assert snippet.inner_text().splitlines()[1] == loads
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    model.get_by_role("button", name="Copy").click()
    assert page.evaluate("navigator.clipboard.readText()").splitlines() == snippet.inner_text().splitlines()

    # Events: the twelve checkpoints are one line.
    expect(page.get_by_test_id("events")).to_contain_text("Checkpoint saved ×12, last at step 240")
    assert page.locator("#job-events li.event").count() == 2

    # Logs: the newest page, then the one before it, then a search; the newest page follows new lines.
    assert line_ids(page) == lines[-PAGE_LINES:]
    expect(page.get_by_test_id("log-summary")).to_contain_text("450 lines")
    page.screenshot(path=str(screenshots / f"job-page-{size}.png"), full_page=True)
    page.get_by_test_id("log-older").click()
    expect(page.get_by_test_id("log-newest")).to_be_visible()
    assert line_ids(page) == lines[-2 * PAGE_LINES : -PAGE_LINES]
    page.get_by_test_id("log-older").click()
    expect(page.locator("#job-log-lines .log-line")).to_have_count(450 - 2 * PAGE_LINES)
    assert line_ids(page) == lines[: 450 - 2 * PAGE_LINES]

    page.get_by_test_id("log-search").fill("cuda ERROR")
    expect(page.locator("#job-log-lines .log-line")).to_have_count(1)
    expect(page.locator("#job-log-lines mark")).to_have_text("CUDA error")
    expect(page.get_by_test_id("log-summary")).to_contain_text("1 line containing “cuda ERROR”")

    page.get_by_test_id("log-search").fill("")
    expect(page.locator("#job-log-lines .log-line")).to_have_count(PAGE_LINES)
    JobLogLine.objects.create(job=job, epoch=1, rank=0, line="a line written just now", created_at=timezone.now())
    expect(page.locator("#job-log-lines .log-line").last).to_contain_text("a line written just now", timeout=6_000)
    expect(page.locator("#job-log-lines .log-line")).to_have_count(PAGE_LINES + 1)

    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {size}"
    page.screenshot(path=str(screenshots / f"job-page-{size}-logs-followed.png"), full_page=True)
    assert problems == []
    page.context.close()


class Gate:
    """Holds the next call of a view's helper in the live server until the test lets it go: a request kept in
    flight on purpose, to cross it with another one."""

    def __init__(self, monkeypatch, target: str) -> None:
        module, name = target.rsplit(".", 1)
        self.real = getattr(__import__(module, fromlist=[name]), name)
        self.held, self.release, self.armed = threading.Event(), threading.Event(), False
        monkeypatch.setattr(target, self)

    def __call__(self, *args, **kwargs):
        if self.armed:
            self.armed = False
            self.held.set()
            self.release.wait(10)
        return self.real(*args, **kwargs)


def test_cancel_crossing_a_live_poll_leaves_no_console_error(live_server, alice, chromium, monkeypatch):
    page, problems = open_page(chromium, live_server.url, VIEWPORTS["phone"])

    # A poll in flight while the cancel ends a queued job: the cancel's answer must not replace the poller.
    poll = Gate(monkeypatch, "portal.views.jobs.job_context")
    queued = make_job(alice)
    page.goto(f"{live_server.url}/jobs/{queued.pk}/")
    poll.armed = True
    assert poll.held.wait(5)
    poll.armed = False
    with page.expect_response(lambda response: "/cancel/" in response.url):
        page.get_by_test_id("cancel").click()
    with page.expect_response(lambda response: "/live/" in response.url):
        poll.release.set()
    expect(page.get_by_test_id("job-status").first).to_have_text("Cancelled")
    expect(page.locator("#job-poller")).not_to_have_attribute("hx-trigger", "every 2s", timeout=6_000)

    # A cancel in flight while a poll swaps the status section that holds its form.
    cancel = Gate(monkeypatch, "portal.views.jobs.cancel_job")
    running = make_job(alice, status=JobStatus.RUNNING, plan=PLAN, epoch=1, started_at=timezone.now())
    page.goto(f"{live_server.url}/jobs/{running.pk}/")
    cancel.armed = True
    with page.expect_response(lambda response: "/cancel/" in response.url):
        page.get_by_test_id("cancel").click()
        assert cancel.held.wait(5)
        with page.expect_response(lambda response: "/live/" in response.url):
            pass
        cancel.release.set()
    expect(page.get_by_test_id("job-status").first).to_have_text("Stopping")
    expect(page.get_by_test_id("cancel")).to_have_count(0)
    page.wait_for_timeout(300)  # the answer's swaps and settling
    assert problems == []
    page.context.close()
