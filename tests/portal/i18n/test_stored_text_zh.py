"""Stored text in the reader's language (docs/I18N.md, "Stored text"): a job's timeline, status reason and a
migration's detail are written once, in English, with their msgid and values beside; a Chinese reader reads
them in Chinese, an English reader reads the English as it was stored, and a row written before (English
only) still shows its English.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext_noop

from base.stored_text import StoredText, column_text, render, render_column
from fleet.choices import JobEventKind, JobStatus, MigrationReason
from fleet.models import Job
from tests.portal.i18n.visible_text import needs_translation, untranslated
from tests.support.accounts import token_client
from tests.support.plans import hand_plan
from workers.services import lifecycle
from workers.services.events import record_event, timeline
from workers.services.node_lifecycle import reset_node
from workers.services.placement import allocate
from workers.services.reports import accept_report

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
HOST = "gpu-zh-1"
NAMES = ("alice", "olga", "llama-tiny", HOST, "rtx-4090", "mixed run")


def report(job: Job, node, *items: dict) -> None:
    job.refresh_from_db()
    accept_report(node, job.pk, job.epoch, list(items))


def metric(step: int) -> dict:
    return {"kind": "metric", "rank": 0, "step": step, "loss": 3.0 - step / 10, "tokens_per_s": 100.0}


def checkpoint(job: Job, step: int) -> dict:
    path = f"store:checkpoints/job-{job.pk}/step-{step}"
    return {"kind": "checkpoint", "rank": 0, "step": step, "path": path, "seconds": 0.1}


@pytest.fixture
def moved_job(enroll, planning_job, no_celery) -> Job:
    """A job placed, started, checkpointed at step 5, then moved off a node the operator reset: the services
    wrote its events and reason as they happen on the platform."""
    node, _ = enroll(HOST)
    job = planning_job(max_steps=12, name="mixed run")
    allocate(job, hand_plan((node, 4)))
    report(job, node, metric(1), metric(5), checkpoint(job, 5))
    reset_node(node.pk, by="olga")
    job.refresh_from_db()
    return job


def page(client, job: Job, **headers) -> str:
    response = client.get(reverse("job", args=[job.pk]), **headers)
    assert response.status_code == 200
    return response.content.decode()


def events_of(html: str) -> str:
    """The page's timeline and status reason: the stored text this test is about."""
    start = html.index('data-testid="status-reason"')
    return html[start:]


def test_a_chinese_reader_reads_the_timeline_and_the_reason_in_chinese(alice_client, moved_job):
    job = moved_job
    assert job.status == JobStatus.QUEUED
    assert job.status_reason == "Re-planning from the checkpoint at step 5."  # the column stays English
    html = page(alice_client, job, **ZH)
    for words in (
        "正在从第 5 步的检查点重新规划。",  # the status reason, and the migrated event
        "训练已在 1 个 rank 上开始",
        "已调度到 1× rtx-4090（ZeRO-0）",
        "第 5 步的检查点",
        f"节点丢失（无心跳）（{HOST}）：节点 {HOST} 已被 olga 重置。将从最近的检查点恢复。",
    ):
        assert words in html, words
    assert untranslated(events_of(html), also_allowed=NAMES) == []
    # The migrations table's detail too.
    assert f"节点 {HOST} 已被 olga 重置" in html


def test_an_english_reader_reads_what_was_stored(alice_client, moved_job):
    html = page(alice_client, moved_job)
    for words in (
        "Re-planning from the checkpoint at step 5.",
        "Training started on 1 rank(s)",
        "Placed on 1× rtx-4090 (ZeRO-0)",
        "Checkpoint at step 5",
        f"Node lost (no heartbeat) ({HOST}): node {HOST} was reset by olga. Resuming from the last checkpoint.",
    ):
        assert words in html, words
    messages = list(moved_job.events.order_by("created_at", "id").values_list("message", flat=True))
    assert messages[-1] == "Re-planning from the checkpoint at step 5."
    assert f"node {HOST} was reset by olga" in moved_job.migrations.get().detail


def test_the_api_returns_the_english_and_no_msgid(alice, moved_job):
    api = token_client(alice)
    answer = api.get(f"/api/v1/jobs/{moved_job.pk}/", **ZH).json()
    assert answer["status_reason"] == "Re-planning from the checkpoint at step 5."
    assert f"node {HOST} was reset by olga" in answer["migrations"][0]["detail"]
    events = api.get(f"/api/v1/jobs/{moved_job.pk}/events/", **ZH).json()
    assert "Checkpoint at step 5" in [event["message"] for event in events]
    assert all("text" not in event["data"] for event in events)


def test_an_ended_job_reads_its_end_in_chinese(alice_client, planning_job, enroll, no_celery):
    node, _ = enroll(HOST)
    job = planning_job(max_steps=5)
    allocate(job, hand_plan((node, 4)))
    report(job, node, metric(1), metric(5))
    job.refresh_from_db()
    with transaction.atomic():
        lifecycle.finish_when_ranks_done(job, job.updated_at)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.status_reason == "Trained 5 steps; final loss 2.5000"
    html = page(alice_client, job, **ZH)
    assert "已训练 5 步；最终 loss 2.5000" in html
    assert untranslated(events_of(html), also_allowed=NAMES) == []


def test_an_old_row_without_its_msgid_shows_its_stored_english(alice_client, planning_job):
    job = planning_job(status=JobStatus.QUEUED, status_reason="Waiting for chips: an old reason")
    record_event(job, JobEventKind.NOTICE, "An event from before, in English")
    html = page(alice_client, job, **ZH)
    assert "Waiting for chips: an old reason" in html and "An event from before, in English" in html
    # A reason changed by hand in the operator console no longer matches its msgid: shown as stored.
    job.set_status_reason(StoredText(gettext_noop("Cancelled before it started")))
    job.status_reason = "Edited by the operator"
    job.save()
    assert "Edited by the operator" in page(alice_client, job, **ZH)


def test_the_folded_checkpoints_and_single_events_render_per_reader(planning_job):
    job = planning_job()
    record_event(job, JobEventKind.STARTED, StoredText(gettext_noop("Training started on %(ranks)s rank(s)"), ranks=2))
    with translation.override("zh-hans"):
        assert timeline(job).entries[0].message == "训练已在 2 个 rank 上开始"
    with translation.override("en"):
        assert timeline(job).entries[0].message == "Training started on 2 rank(s)"


# StoredText itself ----------------------------------------------------------------------------------------


def test_stored_text_renders_in_the_active_language_and_stores_english():
    text = StoredText(
        gettext_noop("%(reason)s: %(detail)s. Moving to other chips."),
        reason=StoredText.label(MigrationReason.OUTBID),
        detail="higher bids took 2 of its rtx-4090 chip(s)",
    )
    with translation.override("zh-hans"):
        assert (
            text.english()
            == "Outbid on the spot market: higher bids took 2 of its rtx-4090 chip(s). Moving to other chips."
        )
        chinese = render(text.as_data(), "fallback")
    assert chinese.startswith("在 Spot 市场被出价超过：") and chinese.endswith("。正在热迁移到其他芯片。")
    assert not needs_translation(chinese, also_allowed=("higher bids took 2 of its rtx-4090 chip(s)",))
    assert StoredText.from_data(text.as_data()) == text


def test_a_label_inside_a_sentence_is_lower_cased_in_english_only():
    text = StoredText(
        gettext_noop("Training insurance for job %(job)s: %(reason)s"),
        job=7,
        reason=StoredText.label(MigrationReason.LOST_NODE, case="lower"),
    )
    assert text.english() == "Training insurance for job 7: node lost (no heartbeat)"
    with translation.override("zh-hans"):
        assert text.render() == "训练任务 7 的训练保险：节点丢失（无心跳）"


def test_render_falls_back_to_the_stored_english():
    assert render(None, "stored") == "stored"
    assert render({}, "stored") == "stored"
    assert render({"msgid": "Checkpoint at step %(step)s", "params": {}}, "stored") == "stored"  # a missing value
    assert render({"msgid": "%(n)d chips", "params": {"n": "many"}}, "stored") == "stored"  # a bad format
    assert render({"msgid": 3}, "stored") == "stored"
    data = {"msgid": "Checkpoint at step %(step)s", "params": {"step": 9}}
    with translation.override("zh-hans"):
        assert render(data, "stored") == "第 9 步的检查点"
    # A column whose English no longer says what the msgid says shows as stored; one that does, translated.
    with translation.override("zh-hans"):
        assert render_column("Checkpoint at step 8", data) == "Checkpoint at step 8"
        assert render_column("Checkpoint at step 9", data) == "第 9 步的检查点"
    assert column_text("Checkpoint at step 9", data) == StoredText.from_data(data)
    assert column_text("plain", {}) == "plain"


def test_a_broken_translation_falls_back_to_the_stored_english(monkeypatch):
    monkeypatch.setattr("base.stored_text.gettext", lambda msgid: "%(missing)s")
    assert render({"msgid": "Checkpoint at step %(step)s", "params": {"step": 9}}, "Checkpoint at step 9") == (
        "Checkpoint at step 9"
    )


class Thing:
    def __str__(self) -> str:
        return "x"


def test_values_are_kept_as_json():
    text = StoredText("%(a)s %(b)s %(c)s", a=1.5, b=None, c=Thing())
    assert text.as_data()["params"] == {"a": 1.5, "b": None, "c": "x"}
    with pytest.raises(ValueError):
        StoredText("x", case="upper")


@override_settings(LANGUAGE_CODE="en")
def test_plain_strings_pass_through():
    assert StoredText.of("as typed").english() == "as typed"
    assert StoredText.of(StoredText("x")) == StoredText("x")


def test_a_ledger_memo_reads_in_the_readers_language(client, alice):
    from billing.models import OperatorSettings
    from billing.services.credits import grant_trial_credit

    operator = OperatorSettings.load()
    operator.trial_credit = 5_000_000
    operator.save()
    txn = grant_trial_credit(alice)
    amount = txn.memo_text["params"]["amount"]
    assert txn.memo == f"Welcome to Starverse: {amount} trial credit"  # the column (CSV, console, API): English
    client.force_login(alice)
    assert f"欢迎使用 Starverse：{amount} 体验金" in client.get(reverse("billing"), **ZH).content.decode()
    assert f"Welcome to Starverse: {amount} trial credit" in client.get(reverse("billing")).content.decode()
