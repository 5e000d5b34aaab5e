"""The training pages in Simplified Chinese (#33): the launch page and its live quote, the jobs list, a job's page
(status, plan, recipe, events, chips, migrations, logs, checkpoints, artifacts), the datasets page with a preview,
the models page and the operator's cancel page: no visible English left but the test's own names and what the
platform stored as it happened (event messages, log lines, a migration's detail), which stay as they were said.

Plus the same pages in English are unchanged, and their times carry the person's zone.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from fleet.choices import JobEventKind, JobStatus, MigrationReason, MigrationStatus
from fleet.models import Job
from tests.portal.i18n.visible_text import untranslated
from tests.support.portal_pages import LAUNCH, PLAN, make_job
from tests.support.stored import stored_checkpoint
from workers.models import JobCheckpoint, JobMigration
from workers.services.datasets import store_dataset
from workers.services.events import record_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}
MOMENT = datetime(2026, 12, 7, 6, 5, tzinfo=UTC)  # 14:05 in Shanghai
# The test's own names, the chips' names and slugs as the catalog spells them, and what the platform stored in
# English as it happened (event messages, log lines, a migration's detail): data, not page text.
NAMES = (
    "alice",
    "mixed run",
    "my corpus",
    "llama-tiny",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "NVIDIA",
    "Google",
    "Huawei",
    "Cambricon",
    "rtx-4090",
    "tpu-v5e",
    "ascend-910b",
    "mlu370",
    "sim-rtx-4090-01",
    "sim-tpu-v5e-01",
    "gpu-node-7",
    "Placed on 1 × rtx-4090 + 1 × tpu-v5e",
    "higher bids took 2 of its rtx-4090 chip(s)",
    "synthetic",
    "Llama",
    "Mistral",
    "Qwen2",
    "DeepSpeed",
    "MLU370-X8",
    "Adam",
)
STORED = {"meta.json": b"{}", "model/config.json": b"{}", "model/model.safetensors": b"w" * 2048}


def zh(client, url, **params) -> str:
    response = client.get(url, params, **ZH)
    assert response.status_code == 200, response.content.decode()[:2000]
    html = response.content.decode()
    assert 'lang="zh-hans"' in html or "<html" not in html
    return html


def corpus(owner):
    lines = b"".join(b'{"text": "line %d of the corpus"}\n' % n for n in range(12))
    return store_dataset(owner, SimpleUploadedFile("corpus.jsonl", lines), name="my corpus")


@pytest.fixture
def job_with_history(running_job, tmp_path) -> Job:
    """The running job with a checkpoint, a finished migration, a folded run of checkpoint events, an eval."""
    job = running_job
    job.eval_every, job.eval_loss, job.created_at = 10, 2.7, MOMENT
    path = stored_checkpoint(job.pk, 40, STORED, tmp_path)
    JobCheckpoint.objects.create(
        job=job, epoch=1, step=40, key=path.removeprefix("store:"), loss=2.6, eval_loss=2.7, bytes=4096,
        created_at=MOMENT,
    )  # fmt: skip
    job.latest_checkpoint, job.latest_checkpoint_step = path, 40
    job.save()
    for step in (20, 30, 40):
        record_event(job, JobEventKind.CHECKPOINTED, f"Checkpoint saved at step {step}", data={"step": step})
    JobMigration.objects.create(
        job=job, reason=MigrationReason.OUTBID, detail="higher bids took 2 of its rtx-4090 chip(s)",
        status=MigrationStatus.RESUMED, from_epoch=1, to_epoch=2, nodes=["gpu-node-7"], notice_at=MOMENT,
        notice_seconds=30, step_at_notice=42, checkpoint_step=42, checkpoint_at=MOMENT + timedelta(seconds=2),
        resumed_at=MOMENT + timedelta(seconds=9), resume_step=43, steps_lost=0, lost_seconds=0.0, refund=12_345,
    )  # fmt: skip
    return job


def test_the_launch_page_and_its_quote_speak_chinese(alice_client, alice, seeded_nodes_online):
    corpus(alice)
    assert untranslated(zh(alice_client, reverse("train")), also_allowed=NAMES) == []
    # The form shows every part once it holds values: the advanced section and the hand-picked chips.
    rerun = make_job(alice, name="mixed run", spot=True, spot_bid_per_hour=800_000, status=JobStatus.SUCCEEDED)
    html = zh(alice_client, reverse("train"), rerun=rerun.pk)
    assert "已填入训练任务" in html
    assert untranslated(html, also_allowed=NAMES) == []

    quote = alice_client.post(reverse("train_quote"), {**LAUNCH, "spot": "on"}, **ZH).content.decode()
    assert 'data-testid="quote-price"' in quote and "总费用估算" in quote
    assert untranslated(quote, also_allowed=NAMES) == []
    too_low = alice_client.post(reverse("train_quote"), {**LAUNCH, "max_budget": "0.01"}, **ZH).content.decode()
    assert 'data-testid="quote-problem"' in too_low
    # The planner's own explanation (kernel/planner) is the API helper's to translate; the title is ours.
    title = too_low[too_low.index('quote-problem-title">') :].split("<", 1)[0]
    assert "预算过低" in title or "Budget" not in title
    bad = alice_client.post(reverse("train_quote"), {**LAUNCH, "max_steps": "x"}, **ZH).content.decode()
    assert "请检查表单" in bad and "最大步数" in bad


def test_the_jobs_list_speaks_chinese_with_the_time_in_shanghai(alice_client, alice, running_job):
    Job.objects.filter(pk=running_job.pk).update(created_at=MOMENT)
    html = zh(alice_client, reverse("jobs"))
    assert "运行中" in html and "重新运行" in html
    assert ">2026年12月7日 14:05 UTC+8</time>" in html
    assert untranslated(html, also_allowed=NAMES) == []


def test_the_job_page_speaks_chinese(alice_client, job_with_history):
    html = zh(alice_client, reverse("job", args=[job_with_history.pk]))
    for words in ("芯片组合", "热迁移", "在 Spot 市场被出价超过", "检查点", "已保存检查点 ×3", "训练配方", "日志"):
        assert words in html, words
    assert ">14:05:00 UTC+8</time>" in html  # the migration's notice, in the person's zone
    assert untranslated(html, also_allowed=NAMES) == []
    live = zh(alice_client, reverse("job_live", args=[job_with_history.pk]))
    assert untranslated(live, also_allowed=NAMES) == []


def test_a_finished_job_page_speaks_chinese(alice_client, alice, tmp_path):
    job = make_job(
        alice, name="mixed run", status=JobStatus.FAILED, status_reason="", plan=PLAN, epoch=1, step=200, loss=1.5,
        started_at=MOMENT - timedelta(minutes=3), finished_at=MOMENT,
    )  # fmt: skip
    stored_checkpoint(job.pk, 200, STORED, tmp_path)
    html = zh(alice_client, reverse("job", args=[job.pk]))
    assert re.search(r"结束于 <time datetime=\"2026-12-07T06:05:00\+00:00\">2026年12月7日 14:05 UTC\+8</time>", html)
    assert untranslated(html, also_allowed=NAMES) == []


def test_the_datasets_page_and_its_preview_speak_chinese(alice_client, alice):
    dataset = corpus(alice)
    html = zh(alice_client, reverse("datasets"), preview=dataset.pk)
    assert "预览：my corpus" in html and "字节级（目录模型）" in html
    assert untranslated(html, also_allowed=NAMES) == []
    refused = alice_client.post(reverse("datasets"), {"file": SimpleUploadedFile("empty.txt", b"")}, **ZH)
    assert refused.status_code == 400
    # store_dataset's refusal (workers/services/datasets.py) is the API helper's; the page around it is ours.
    assert untranslated(refused.content.decode().split('class="field-error"')[0], also_allowed=NAMES) == []


def test_the_models_page_speaks_chinese(alice_client):
    html = zh(alice_client, reverse("models"))
    assert "内置模型" in html and "从头训练" in html
    assert untranslated(html, also_allowed=NAMES) == []


def test_the_operators_cancel_page_speaks_chinese(client, alice, make_user, running_job):
    operator = make_user("olga", is_staff=True, is_superuser=True)
    client.force_login(operator)
    html = zh(client, reverse("admin:fleet_job_cancel", args=[running_job.pk]))
    assert "这些训练任务将被取消" in html and "取消 1 个训练任务" in html
    # The console's frame (its sidebar's model names, the title) is the admin's own; the page's content is ours.
    # Its heading and the reason's help text come from workers/admin_jobs.py, which another area translates.
    content = html[html.index('<div id="content"') :]
    admin_py = ("Cancel 1 job?", "The owner reads it on the job page and in the e-mail the cancel sends.")
    assert untranslated(content, also_allowed=(*NAMES, *admin_py)) == []


def test_in_english_the_pages_read_as_before_with_the_zone(alice_client, job_with_history):
    html = alice_client.get(reverse("job", args=[job_with_history.pk])).content.decode()
    assert '<html lang="en">' in html
    assert "Step <strong>50</strong> of 200 · 25%" in html and "Chip mix" in html
    assert '· created <time datetime="2026-12-07T06:05:00+00:00">2026-12-07 14:05 UTC+8</time>' in html
    assert "Checkpoint saved ×3, last at step 40" in html
    assert "Outbid on the spot market" in html and "30 s notice, at step 42" in html
    jobs = alice_client.get(reverse("jobs")).content.decode()
    assert '<th scope="col">Created</th>' in jobs and ">2026-12-07 14:05 UTC+8</time>" in jobs
    train = alice_client.get(reverse("train")).content.decode()
    assert "Pick a model and an hourly budget." in train and ">Hourly budget (¥)<" in train
