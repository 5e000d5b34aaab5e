"""The domain refusals behind the API's errors and the pages' messages in the request's language (#33): a job's
checkpoints, model and TensorBoard files, its logs, datasets (size, quota, in use), model uploads, a finished
job's model as a new job's, the ledger's hour groups and the operator's credit form and two-factor requirement.
Each is Chinese for a zh-CN request, its `code` (where it has one) stays English, and in English it reads as
before."""

from __future__ import annotations

import re
import zipfile

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.forms import ValidationError
from django.urls import reverse
from django.utils import timezone, translation

from billing.forms import CreditAdjustmentForm
from billing.models import OperatorSettings
from billing.services.credits import grant_trial_credit
from fleet.choices import JobStatus, TrainingMode
from fleet.models import Dataset, Job
from kernel.modelfiles.weights import check_contiguous
from kernel.words import Words
from tests.portal.i18n.visible_text import needs_translation
from tests.support.jobs import JOB_SPEC
from tests.support.model_archives import copy_model, member, pack, tar_with
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobCheckpoint, JobLogLine
from workers.services.models import ModelFileError, model_file_message

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
# The API's words a Chinese message keeps: fields, folders, references and requests.
NAMES = ("merged=true", "model/", "adapter/", "job:<id>", "after", "before", "search", "GET /api/v1/jobs/")
MODEL = {"meta.json": b"{}", "model/config.json": b'{"model_type": "llama"}', "model/model.safetensors": b"\x01" * 64}
WITHOUT_MODEL = {"meta.json": b"{}", "state/optimizer.pt": b"\x02" * 64}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.STAGING_CACHE_DIR = tmp_path / "web-cache"


@pytest.fixture
def api(alice, fund, api_for, no_celery):
    fund(alice)
    client = api_for(alice)
    client.default_format = "json"
    return client


def a_job(owner, **fields) -> Job:
    return Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=40, max_budget_per_hour=28_000_000,
        **fields,
    )  # fmt: skip


def with_checkpoint(job: Job, step: int, files: dict | None, tmp_path, latest: bool = True) -> JobCheckpoint:
    """A recorded checkpoint of the job; `files` None: recorded, but its tree is gone from storage."""
    path = stored_checkpoint(job.pk, step, files, tmp_path) if files else f"store:checkpoints/job-{job.pk}/step-{step}"
    row = JobCheckpoint.objects.create(
        job=job, epoch=1, step=step, key=path.removeprefix("store:"), loss=1.0, created_at=timezone.now()
    )
    if latest:
        job.latest_checkpoint, job.latest_checkpoint_step = path, step
        job.save(update_fields=["latest_checkpoint", "latest_checkpoint_step"])
    return row


def chinese(response, status: int, code: str | None = None) -> list[str]:
    """The error's detail and per-field messages, checked to be Chinese; its code stays English."""
    assert response.status_code == status, response.content
    body = response.json()
    if code is not None:
        assert body["code"] == code, body
    texts = [body["detail"]] + [str(text) for texts in (body.get("errors") or {}).values() for text in texts]
    assert [text for text in texts if needs_translation(text, also_allowed=NAMES)] == [], body
    return texts


# -- a job's checkpoints, model and TensorBoard files ------------------------------------------------


def test_a_missing_checkpoint_is_a_chinese_404_naming_the_steps_the_job_has(api, alice, tmp_path):
    job = a_job(alice, status=JobStatus.SUCCEEDED)
    url = f"/api/v1/jobs/{job.pk}/checkpoints/5/download/"

    [detail] = chinese(api.get(url, **ZH), 404, "checkpoint_not_found")
    assert detail == f"训练任务 {job.pk} 在第 5 步没有检查点（已有检查点的步数：无）。"
    english = api.get(url, **EN).json()
    assert english["detail"] == f"Job {job.pk} has no checkpoint at step 5 (its checkpoints: none)."

    with_checkpoint(job, 10, MODEL, tmp_path)
    [detail] = chinese(api.delete(f"/api/v1/jobs/{job.pk}/checkpoints/7/", **ZH), 404, "checkpoint_not_found")
    assert detail.endswith("（已有检查点的步数：10）。")


def test_a_checkpoint_no_longer_stored_or_without_its_model_is_refused_in_chinese(api, alice, tmp_path):
    job = a_job(alice, status=JobStatus.SUCCEEDED)
    with_checkpoint(job, 10, None, tmp_path, latest=False)
    with_checkpoint(job, 20, WITHOUT_MODEL, tmp_path)

    [gone] = chinese(api.get(f"/api/v1/jobs/{job.pk}/checkpoints/10/download/", **ZH), 404, "checkpoint_not_found")
    assert "已不在存储中" in gone
    [bare] = chinese(api.get(f"/api/v1/jobs/{job.pk}/checkpoints/20/download/", **ZH), 409)
    assert "model/ 文件夹" in bare and "Hugging Face 格式" in bare
    english = api.get(f"/api/v1/jobs/{job.pk}/checkpoints/20/download/", **EN).json()
    assert english["detail"] == (
        f"Job {job.pk}'s checkpoint at step 20 has no model/ folder: it was saved without its Hugging Face form "
        "(by an older runtime, or by a stop asked to be quick)."
    )


def test_merged_weights_of_a_full_fine_tune_are_refused_in_chinese(api, alice, tmp_path):
    job = a_job(alice, status=JobStatus.SUCCEEDED, mode=TrainingMode.FULL)
    with_checkpoint(job, 10, MODEL, tmp_path)

    for url in (
        f"/api/v1/jobs/{job.pk}/model/?merged=true",
        f"/api/v1/jobs/{job.pk}/checkpoints/10/download/?merged=1",
    ):
        texts = chinese(api.get(url, **ZH), 400)
        assert "merged=true 仅适用于 LoRA 训练任务" in texts[-1]


def test_the_checkpoint_a_running_job_resumes_from_is_kept_saying_so_in_chinese(api, alice, alice_client, tmp_path):
    job = a_job(alice, status=JobStatus.RUNNING)
    with_checkpoint(job, 10, MODEL, tmp_path)

    [detail] = chinese(api.delete(f"/api/v1/jobs/{job.pk}/checkpoints/10/", **ZH), 409)
    assert detail.startswith(f"第 10 步是训练任务 {job.pk} 的最新检查点，该训练任务的状态为“运行中”")
    english = api.delete(f"/api/v1/jobs/{job.pk}/checkpoints/10/", **EN).json()
    assert english["detail"].startswith(f"Step 10 is the latest checkpoint of job {job.pk}, which is running: ")

    page = alice_client.post(reverse("job_checkpoint_delete", args=[job.pk, 10]), **ZH)
    [message] = [str(message) for message in get_messages(page.wsgi_request)]
    assert message.startswith("第 10 步是训练任务") and not needs_translation(message)


def test_a_model_or_tensorboard_files_not_there_yet_are_chinese_404s(api, alice):
    job = a_job(alice, status=JobStatus.QUEUED)

    [model] = chinese(api.get(f"/api/v1/jobs/{job.pk}/model/", **ZH), 404)
    assert model == f"训练任务 {job.pk} 还没有模型（queued）：模型会在训练任务完成或停止时导出。"
    [files] = chinese(api.get(f"/api/v1/jobs/{job.pk}/tensorboard/", **ZH), 404)
    assert files.startswith(f"训练任务 {job.pk} 还没有 TensorBoard 文件")
    assert api.get(f"/api/v1/jobs/{job.pk}/model/", **EN).json()["detail"] == (
        f"Job {job.pk} has no model yet (queued): it is exported when the job finishes or is stopped."
    )


def test_a_job_whose_model_cant_be_trained_on_is_refused_in_chinese(api, alice):
    running = a_job(alice, status=JobStatus.RUNNING)
    ended = a_job(alice, status=JobStatus.FAILED)

    for model, expected in (
        ("job:999999", "您的训练任务中没有 job:999999"),
        (f"job:{running.pk}", f"训练任务 {running.pk} 的状态为“运行中”"),
        (f"job:{ended.pk}", f"训练任务 {ended.pk} 没有保存检查点"),
    ):
        texts = chinese(api.post("/api/v1/jobs/", {**JOB_SPEC, "model": model}, **ZH), 400)
        assert any(expected in text for text in texts), texts


def test_a_bad_log_query_is_refused_in_chinese(api, alice, alice_client):
    job = a_job(alice, status=JobStatus.RUNNING)
    JobLogLine.objects.create(job=job, epoch=1, rank=0, line="step 1", created_at=timezone.now())

    texts = chinese(api.get(f"/api/v1/jobs/{job.pk}/logs/?after=x", **ZH), 400)
    assert "after 必须是日志行 ID（非负整数）。" in texts
    texts = chinese(api.get(f"/api/v1/jobs/{job.pk}/logs/?search=" + "a" * 201, **ZH), 400)
    assert "search 最多 200 个字符。" in texts
    page = alice_client.get(reverse("job", args=[job.pk]), {"before": "1", "after": "2"}, **ZH)
    assert page.status_code == 400 and page.content.decode() == "请给出 before 或 after，不要同时给出。"


# -- datasets --------------------------------------------------------------------------------------


def upload(api, content: bytes, **headers):
    return api.post("/api/v1/datasets/", {"file": SimpleUploadedFile("a.txt", content)}, format="multipart", **headers)


def test_a_dataset_over_the_limit_past_the_quota_or_in_use_is_refused_in_chinese(api, alice, settings):
    settings.DATASET_MAX_BYTES = 1024
    [detail] = chinese(upload(api, b"line of text\n" * 200, **ZH), 413)
    assert "数据集最多 1,024 字节（0.0 MiB）" in detail

    settings.DATASET_MAX_BYTES = 1024 * 1024
    settings.STORAGE_QUOTA_BYTES = 150
    assert upload(api, b"x" * 100).status_code == 201
    texts = chinese(upload(api, b"z" * 100, **ZH), 400)
    assert texts[-1].startswith("此数据集占用 100") and "您的存储配额为 150" in texts[-1]

    dataset = Dataset.objects.get(owner=alice)
    a_job(alice, status=JobStatus.SUCCEEDED, dataset_upload=dataset)
    texts = chinese(api.delete(f"/api/v1/datasets/{dataset.pk}/", **ZH), 400)
    assert "此数据集正被训练任务使用，无法删除。" in texts
    english = api.delete(f"/api/v1/datasets/{dataset.pk}/", **EN).json()
    assert english["errors"]["dataset"] == ["This dataset is used by a job and cannot be deleted."]


def test_what_is_wrong_inside_a_dataset_file_is_said_in_chinese(api, alice):
    """The checks run in the kernel, which keeps its English template and values; the platform translates."""

    def refused(name: str, content: bytes, **headers) -> str:
        response = api.post(
            "/api/v1/datasets/", {"file": SimpleUploadedFile(name, content)}, format="multipart", **headers
        )
        return chinese(response, 400)[-1] if headers else response.json()["errors"]["file"][0]

    chat = b'{"messages": [{"role": "user", "content": "hi"}]}\n'
    assert refused("a.jsonl", chat, **ZH) == ('第 1 行：没有 "assistant" 消息；对话记录训练的是其中 assistant 的回复。')
    assert refused("a.jsonl", chat) == ('Line 1: no "assistant" message; a chat record trains on its assistant turns.')
    assert refused("a.jsonl", b'{"text": 3}\n', **ZH) == '第 1 行："text" 必须是字符串，而不是数字。'
    assert refused("a.jsonl", b'{"text": 3}\n') == 'Line 1: "text" must be a string, not a number.'
    assert refused("a.jsonl", b"{}\n", **ZH).endswith("它的键是 无。")
    assert "nothing to train on" not in refused("a.txt", b"\n \n", **ZH)


# -- model uploads ---------------------------------------------------------------------------------


def test_what_is_wrong_with_an_uploaded_model_is_said_in_chinese(api, alice, model_dirs, tmp_path, settings):
    """The archive and folder checks run in the kernel, which keeps its English template and values (English
    phrases among them: Words); the platform translates. File names and third-party details stay as they are."""
    llama = model_dirs["llama"]

    def refused(archive, status: int, headers: dict):
        with open(archive, "rb") as file:
            return api.post("/api/v1/models/", {"file": file}, format="multipart", **headers)

    def both(archive, status: int = 400) -> tuple[str, str, str]:
        """The refusal's code, and its words in Chinese and in English."""
        zh, english = refused(archive, status, ZH), refused(archive, status, EN)
        texts = chinese(zh, status)
        assert english.status_code == status, english.content
        body = english.json()
        assert zh.json().get("code") == body.get("code")
        return body.get("code"), texts[-1], (body["errors"]["file"][0] if status == 400 else body["detail"])

    notes = tmp_path / "notes.tar.gz"
    notes.write_text("config.json and the weights are attached")
    code, zh, english = both(notes)
    assert code == "not_an_archive"
    assert zh.startswith("上传的文件不是 .tar.gz、.tgz、.tar 或 .zip 归档。请将模型文件夹")
    assert "`tar czf model.tar.gz -C DIR .`" in zh and "`starverse model upload DIR`" in zh
    assert english == (
        "The upload is not a .tar.gz, .tgz, .tar or .zip archive. Pack the model folder (config.json, "
        "model.safetensors, tokenizer files) with `tar czf model.tar.gz -C DIR .`, or upload it with "
        "`starverse model upload DIR`."
    )

    no_config = pack(copy_model(llama, tmp_path / "no-config", drop=("config.json",)), tmp_path / "no-config.tar.gz")
    code, zh, english = both(no_config)
    assert code == "missing_config"
    assert zh.startswith("模型文件夹顶层没有 config.json（找到的是：") and "model.safetensors" in zh
    assert english.startswith("No config.json at the top of the model folder (found: ")
    assert english.endswith(
        "Save the model with model.save_pretrained(dir, safe_serialization=True), which writes config.json beside "
        "the weights."
    )

    broken = copy_model(llama, tmp_path / "broken")
    (broken / "config.json").write_text("{not json")
    code, zh, english = both(pack(broken, tmp_path / "broken.zip"))
    assert code == "invalid_config"
    assert zh.startswith("config.json 不是有效的 JSON：Expecting property name")  # the parser's words stay
    assert english.startswith("config.json is not valid JSON: Expecting property name")

    gpt2 = copy_model(llama, tmp_path / "gpt2", config={"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    code, zh, english = both(pack(gpt2, tmp_path / "gpt2.tgz"))
    assert code == "unsupported_model"
    assert zh.startswith("不支持的模型架构“gpt2”。支持的架构：llama (LlamaForCausalLM)")
    assert english.startswith("Unsupported model architecture 'gpt2'. Supported: llama (LlamaForCausalLM)")

    shapes = copy_model(llama, tmp_path / "shapes", config={"intermediate_size": 96})
    code, zh, english = both(pack(shapes, tmp_path / "shapes.tar"))
    assert code == "weights_mismatch"
    assert zh.startswith("权重与 config.json 不符：") and "的形状为 [128, 64]，而 config.json 要求 [96, 64]" in zh
    assert "has shape [128, 64]; config.json implies [96, 64]" in english

    padding = tar_with(tmp_path / "padding.tar.gz", llama, member("padding.dat"), data=b"x")
    code, zh, english = both(padding)
    assert code == "unneeded_file"
    assert zh.startswith("“padding.dat”不是任何加载器会读取的文件；上传的内容只能包含 config.json、")
    assert zh.endswith("请去掉它后重新打包。")
    assert english.startswith("'padding.dat' is not a file any loader reads; an upload holds only config.json, ")

    settings.MODEL_MAX_BYTES = 1024 * 1024
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("model.safetensors", bytes(8 * 1024 * 1024))
    _, zh, english = both(bomb, status=413)
    assert zh == "该归档解压后超过上限；上限为 1,048,576 字节。请以 safetensors 格式上传模型，不要附带多余的文件。"
    assert english == (
        "The archive unpacks to more than that; the limit is 1,048,576 bytes. Upload the model in safetensors "
        "without extra files."
    )
    assert not alice.uploaded_models.exists()


def test_a_refusals_phrases_are_translated_inside_it_and_a_broken_one_stays_english():
    """Words among a refusal's values, with values of their own, are said in the reader's language too; a
    translation that can't be filled in falls back on the kernel's English."""
    damaged = Words.of("%(file)s is not a valid safetensors file", file="model.safetensors")
    with pytest.raises(ModelFileError) as refused:
        check_contiguous([(0, 4, "a"), (8, 12, "b")], 12, damaged)
    with translation.override("zh-hans"):
        assert model_file_message(refused.value) == (
            "model.safetensors 不是有效的 safetensors 文件：b 的数据从第 8 字节开始，而不是第 4 字节"
            "（与前一个张量之间有 4 字节未被使用）。请用 model.save_pretrained(dir, safe_serialization=True) 保存。"
        )
        broken = ModelFileError.of("%(file)s is not valid JSON: %(error)s.", file="config.json", error="oops")
        broken.values.pop("error")
        assert model_file_message(broken) == "config.json is not valid JSON: oops."
        assert model_file_message(ModelFileError("Said already.")) == "Said already."
    with translation.override("en"):
        assert model_file_message(refused.value) == str(refused.value)


# -- billing: the ledger's hour groups, the operator's credit form, staff two-factor --------------------


def test_a_ledger_group_that_is_no_hour_is_refused_in_chinese(alice_client):
    response = alice_client.get(reverse("ledger_group", args=[1, 5]), **ZH)
    assert response.status_code == 400
    assert response.content.decode() == "5 不是整点（能被 3600 整除的 Unix 时间）。"
    english = alice_client.get(reverse("ledger_group", args=[1, 5]), **EN).content.decode()
    assert english == "5 is not the start of an hour (a Unix time divisible by 3600)."


def adjust(client, user, amount: str, reason: str, **headers) -> str:
    url = reverse("admin:portal_adjust_credit", args=[user.pk])
    data = {"amount": amount, "reason": reason, "idempotency_key": f"adjust:{amount}"}
    response = client.post(url, data, **headers)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def errors_of(html: str) -> list[str]:
    """The texts of the form's error lists."""
    found = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', html, re.S)
    return [re.sub(r"<[^>]+>", "", item).strip() for item in found]


def test_the_operators_credit_adjustment_is_refused_in_chinese(client, operator, alice):
    client.force_login(operator)
    grant_trial_credit(alice)

    assert errors_of(adjust(client, alice, "0", "goodwill", **ZH)) == ["金额不能为零。"]
    assert errors_of(adjust(client, alice, "0", "goodwill", **EN)) == ["The amount cannot be zero."]
    [debit] = errors_of(adjust(client, alice, "-10.01", "clawback", **ZH))
    assert debit.startswith("额度不足：余额为") and not needs_translation(debit)

    form = CreditAdjustmentForm()
    form.cleaned_data = {"reason": " "}
    with translation.override("zh-hans"), pytest.raises(ValidationError) as refused:
        form.clean_reason()
    assert refused.value.messages == ["请说明调整此用户额度的原因。"]


def test_staff_sent_to_set_up_two_factor_are_told_why_in_chinese(client, operator):
    OperatorSettings.objects.update_or_create(pk=1, defaults={"staff_two_factor_required": True})
    client.force_login(operator)

    response = client.get("/admin/", **ZH)

    assert response.status_code == 302
    [message] = [str(message) for message in get_messages(response.wsgi_request)]
    assert message == "工作人员必须使用双重验证登录：请先添加身份验证器应用，再打开管理后台。"


def test_the_planners_reason_inside_its_refusal_is_said_and_stored_in_the_readers_language():
    """The planner (no Django) marks its English phrase as Words; the platform says it, or stores it to say."""
    from kernel.planner.islands import WHY
    from kernel.planner.types import NoCapacity
    from workers.services.launch import planning_message, planning_text

    refused = NoCapacity.of(
        "%(asked)s are free only on real and simulated nodes together; %(why)s.", asked="2 rtx-4090", why=WHY
    )
    with translation.override("zh-hans"):
        said = planning_message(refused)
        assert "不启用岛时" in said and said.startswith("2 rtx-4090 ")
        assert planning_text(refused).render() == said
    with translation.override("en"):
        assert planning_message(refused) == str(refused) == planning_text(refused).english()
