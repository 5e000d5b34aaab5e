"""A job's trained model as one download: a tar of its Hugging Face folder with a model card.

The runtime exports `model/` (full weights; for LoRA the merged ones) and, for LoRA, `adapter/`
into the final or stop checkpoint's tree in object storage. The archive is streamed: each file's
header (its size from the tree's manifest) and then its bytes as they are read from the store, so a
multi-gigabyte model never sits in the web server's memory.
"""

from __future__ import annotations

import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from django.utils.translation import gettext as _

from billing.services.statements import job_charged
from fleet.choices import TrainingMode
from fleet.models import Job, UploadedModel
from kernel.money import format_money
from kernel.storage import StorageError, Store
from kernel.storage.locations import is_stored, key_of
from kernel.storage.trees import FileEntry, Manifest, read_manifest
from workers.models import JobCheckpoint
from workers.services.placement import checkpoint_prefix
from workers.services.storage import platform_store

MODEL_DIR, ADAPTER_DIR = "model", "adapter"
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE


class ModelNotReady(Exception):
    """The job has no exported model (yet); the message says why."""


class MergedNotApplicable(ValueError):
    """Merged weights were asked of a job that trained every weight."""


def merged_not_applicable() -> str:
    return _("merged=true applies to LoRA jobs; this job trained every weight (model/ is whole).")


@dataclass(frozen=True)
class ExportedStep:
    """A checkpoint tree that holds an exported model: its key (checkpoints/job-<id>/step-<n>) and manifest."""

    prefix: str
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.prefix.rsplit("/", 1)[-1]

    def folder(self, which: str) -> dict[str, FileEntry]:
        """The files of `which` (model/ or adapter/), by their names inside it."""
        inside = which + "/"
        return {name[len(inside) :]: entry for name, entry in self.manifest.files.items() if name.startswith(inside)}


@dataclass(frozen=True)
class ModelDownload:
    filename: str
    store: Store
    prefix: str  # the folder's key: checkpoints/job-<id>/step-<n>/model
    files: dict[str, FileEntry]
    card: str

    def stream(self) -> Iterator[bytes]:
        return tar_stream(
            self.store, self.prefix, self.files, self.filename.removesuffix(".tar"), {"README.md": self.card.encode()}
        )


def model_download(job: Job, merged: bool = False) -> ModelDownload:
    """What `GET /jobs/{id}/model/` sends; raises ModelNotReady, MergedNotApplicable or StorageError."""
    lora = job.mode == TrainingMode.LORA
    if merged and not lora:
        raise MergedNotApplicable(merged_not_applicable())
    step = exported_step(job)
    if step is None:
        raise ModelNotReady(
            _("Job %(job)s has no model yet (%(status)s): it is exported when the job finishes or is stopped.")
            % {"job": job.pk, "status": job.status}
        )
    which = ADAPTER_DIR if lora and not merged else MODEL_DIR
    files = step.folder(which)
    if not files:
        raise ModelNotReady(
            _("Job %(job)s's export at %(step)s has no %(folder)s/ folder.")
            % {"job": job.pk, "step": step.name, "folder": which}
        )
    return ModelDownload(
        f"{download_folder(job, which)}.tar",
        platform_store(),
        f"{step.prefix}/{which}",
        files,
        model_card(job, which, step.name),
    )


def download_folder(job: Job, which: str, step: int | None = None) -> str:
    """The folder a download's tar unpacks to (its name without .tar): job-<id>-model, -adapter or -merged;
    a checkpoint's (`step`) job-<id>-step-<n>-model..."""
    lora = job.mode == TrainingMode.LORA
    kind = "adapter" if which == ADAPTER_DIR else ("merged" if lora else "model")
    return f"job-{job.pk}-{kind}" if step is None else f"job-{job.pk}-step-{step}-{kind}"


def exported_step(job: Job) -> ExportedStep | None:
    """The job's newest checkpoint, when it is a complete tree of this job's that holds an exported model.

    Raises StorageError when storage can't be read."""
    latest = job.latest_checkpoint
    if not latest or not is_stored(latest):
        return None
    prefix = key_of(latest)
    name = prefix.removeprefix(checkpoint_prefix(job) + "/")
    if name == prefix or "/" in name or not name.startswith("step-"):
        return None  # never a tree outside the job's own checkpoints
    manifest = read_manifest(platform_store(), prefix)
    if manifest is None or f"{MODEL_DIR}/config.json" not in manifest.files:
        return None
    return ExportedStep(prefix, manifest)


def model_card(job: Job, which: str, step_name: str, at: JobCheckpoint | None = None) -> str:
    """README.md: what was trained, on what, how far, on which chips, with which losses, for how much. `at`: an
    intermediate checkpoint's download (its own step and losses, and the folder it unpacks to)."""
    charged = job_charged(job)
    chips = job.plan.chip_mix() if job.plan else "–"
    dataset = job.dataset_upload.name if job.dataset_upload_id else job.dataset
    if at is None:
        steps, losses = (
            job.step,
            f"first {_loss(job.first_loss)}, last {_loss(job.loss)}; held-out {_loss(job.eval_loss)}",
        )
    else:
        steps, losses = at.step, f"{_loss(at.loss)}; held-out {_loss(at.eval_loss)} (at this checkpoint)"
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
        f"- Steps: {steps} of {job.max_steps} ({step_name})",
        f"- Chips: {chips}",
        f"- Loss: {losses}",
        f"- Cost: {format_money(charged)}",
        "",
        "## Load it",
        "",
        "```python",
        *load_lines(job, which, at.step if at else None),
        "```",
        "",
    ]
    return "\n".join(lines)


def load_lines(job: Job, which: str, step: int | None = None) -> list[str]:
    """The three lines the job page shows under its Download model button, naming the folder the tar unpacks to."""
    folder = "./" + download_folder(job, which, step)
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


def tar_stream(
    store: Store, key_prefix: str, files: dict[str, FileEntry], prefix: str, extra: dict[str, bytes]
) -> Iterator[bytes]:
    """An uncompressed tar of the stored `files` (names under `key_prefix`) under `prefix/`, plus `extra`
    files, yielded piece by piece. Each file's size is its manifest's; a stored object of another size
    ends the stream with StorageError (the client sees a broken download, never a wrong file)."""
    for relative, entry in sorted(files.items()):
        if relative in extra:
            continue
        yield _header(f"{prefix}/{relative}", entry.size)
        sent = 0
        with store.open(f"{key_prefix}/{relative}") as handle:
            while sent < entry.size and (chunk := handle.read(min(CHUNK, entry.size - sent))):
                sent += len(chunk)
                yield chunk
            if sent != entry.size or handle.read(1):
                raise StorageError(f"{key_prefix}/{relative} is not the {entry.size} bytes its manifest says")
        yield _padding(entry.size)
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
