"""A job's trained model as one download: a tar of its Hugging Face folder with a model card.

The runtime exports `model/` (full weights; for LoRA the merged ones) and, for LoRA, `adapter/`
beside the final or stop checkpoint. The archive is streamed: headers and file chunks are
yielded as they are read, so a multi-gigabyte model never sits in the web server's memory.
"""

from __future__ import annotations

import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.db.models import Sum

from base.money import format_amount
from workers.choices import TrainingMode
from workers.models import Job, UploadedModel
from workers.services.placement import checkpoint_dir

MODEL_DIR, ADAPTER_DIR = "model", "adapter"
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE


class ModelNotReady(Exception):
    """The job has no exported model (yet); the message says why."""


class MergedNotApplicable(ValueError):
    """Merged weights were asked of a job that trained every weight."""


@dataclass(frozen=True)
class ModelDownload:
    filename: str
    folder: Path
    card: str

    def stream(self) -> Iterator[bytes]:
        return tar_stream(self.folder, self.filename.removesuffix(".tar"), {"README.md": self.card.encode()})


def model_download(job: Job, merged: bool = False) -> ModelDownload:
    """What `GET /jobs/{id}/model/` sends; raises ModelNotReady or MergedNotApplicable."""
    lora = job.mode == TrainingMode.LORA
    if merged and not lora:
        raise MergedNotApplicable("merged=true applies to LoRA jobs; this job trained every weight (model/ is whole).")
    step_dir = exported_step(job)
    if step_dir is None:
        raise ModelNotReady(
            f"Job {job.pk} has no model yet ({job.status}): it is exported when the job finishes or is stopped."
        )
    which = ADAPTER_DIR if lora and not merged else MODEL_DIR
    kind = "adapter" if which == ADAPTER_DIR else ("merged" if lora else "model")
    return ModelDownload(f"job-{job.pk}-{kind}.tar", step_dir / which, model_card(job, which, step_dir))


def exported_step(job: Job) -> Path | None:
    """The job's newest checkpoint folder that holds an exported model, if any."""
    if not job.latest_checkpoint:
        return None
    root, step_dir = checkpoint_dir(job).resolve(), Path(job.latest_checkpoint).resolve()
    if root not in step_dir.parents or not (step_dir / MODEL_DIR / "config.json").is_file():
        return None
    return step_dir


def model_card(job: Job, which: str, step_dir: Path) -> str:
    """README.md: what was trained, on what, how far, on which chips, with which losses, for how much."""
    charged = job.allocations.aggregate(total=Sum("charged_total"))["total"] or 0
    chips = job.plan.describe().removeprefix("Placed on ") if job.plan else "–"
    dataset = job.dataset_upload.name if job.dataset_upload_id else job.dataset
    lines = [
        "---",
        "library_name: " + ("peft" if which == ADAPTER_DIR else "transformers"),
        "tags: [starverse]",
        "---",
        "",
        f"# {job.name or f'Starverse job {job.pk}'}",
        "",
        f"- Base model: `{job.model_name}`",
        f"- Training: {'LoRA ' + _lora_text(job.lora) if job.mode == TrainingMode.LORA else 'full fine-tuning'}",
        f"- Data: {dataset}",
        f"- Steps: {job.step} of {job.max_steps} ({step_dir.name})",
        f"- Chips: {chips}",
        f"- Loss: first {_loss(job.first_loss)}, last {_loss(job.loss)}; held-out {_loss(job.eval_loss)}",
        f"- Cost: ¥{format_amount(charged)}",
        "",
        "## Load it",
        "",
        "```python",
        *load_lines(job, which),
        "```",
        "",
    ]
    return "\n".join(lines)


def load_lines(job: Job, which: str) -> list[str]:
    """The three lines the job page shows under its Download model button."""
    folder = "./" + ("adapter" if which == ADAPTER_DIR else "model")
    if which == ADAPTER_DIR:
        return [
            "from peft import PeftModel; from transformers import AutoModelForCausalLM, AutoTokenizer",
            f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base_hint(job)}"), "{folder}")',
            f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
        ]
    return [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f'model = AutoModelForCausalLM.from_pretrained("{folder}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{folder}")'
        + ("" if job.model_name.startswith("model:") else "  # catalog models read bytes: no tokenizer"),
    ]


def base_hint(job: Job) -> str:
    """Where the adapter's base model is: the folder the user uploaded (its name here), or the catalog name."""
    if job.model_name.startswith("model:"):
        model = UploadedModel.objects.filter(pk=int(job.model_name.removeprefix("model:"))).first()
        return f"./{model.name}" if model else "./your-base-model"
    return "./your-base-model"


def _lora_text(lora: dict | None) -> str:
    lora = lora or {}
    return f"(r={lora.get('r')}, alpha={lora.get('alpha')}, modules: {', '.join(lora.get('target_modules') or [])})"


def _loss(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "–"


def tar_stream(folder: Path, prefix: str, extra: dict[str, bytes]) -> Iterator[bytes]:
    """An uncompressed tar of `folder`'s files under `prefix/`, plus `extra` files, yielded piece by piece."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(folder).as_posix()
        if relative in extra:
            continue
        size = path.stat().st_size
        yield _header(f"{prefix}/{relative}", size)
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                yield chunk
        yield _padding(size)
    for name, data in extra.items():
        yield _header(f"{prefix}/{name}", len(data))
        yield data
        yield _padding(len(data))
    yield b"\0" * (2 * BLOCK)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, int(time.time())
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)
