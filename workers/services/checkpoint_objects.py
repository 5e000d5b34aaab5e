"""A job's checkpoints as objects its owner handles: listed with their losses, size and how long each is kept,
downloaded as a Hugging Face model like the final one, deleted one by one.

Every checkpoint the runtime saves holds its own Hugging Face form (hosts/runtime/checkpoint.py: a full
fine-tune's model/, a LoRA job's adapter/; final and stop checkpoints add a LoRA job's merged model/), so a
download streams what is stored, exactly like the final model's (model_download.py). A checkpoint saved
without one (by a runtime from before, or a stop asked to be quick) is refused by name, never converted on
the web server: the web tier has no torch (docs/FINE_TUNING.md, "Checkpoints").
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from fleet.choices import JobStatus, TrainingMode
from fleet.models import Job
from kernel.storage.locations import is_stored, key_of
from kernel.storage.trees import delete_tree, read_manifest
from workers.models import JobCheckpoint
from workers.services.checkpoints import checkpoints_to_keep, is_own_checkpoint
from workers.services.model_download import (
    ADAPTER_DIR,
    MODEL_DIR,
    ExportedStep,
    MergedNotApplicable,
    ModelDownload,
    download_folder,
    merged_not_applicable,
    model_card,
)
from workers.services.storage import platform_store

FINAL, LATEST, STOP, RECENT, PRUNABLE = "final", "latest", "stop", "recent", "prunable"


class CheckpointNotFound(Exception):
    """No checkpoint of the job at that step (never saved, pruned or deleted); the message says which."""


class CheckpointInUse(Exception):
    """Deleting it would take away what the job resumes from."""


class CheckpointNotExported(Exception):
    """The checkpoint holds no Hugging Face folder of the asked form."""


@dataclass(frozen=True)
class Retention:
    """How long checkpoints are kept: settings.CHECKPOINT_KEEP periodic ones per job, pruned every
    CHECKPOINT_PRUNE_SECONDS, plus every stop checkpoint, the latest and the final one."""

    keep_periodic: int
    prune_every_s: int

    @property
    def policy(self) -> str:
        return (
            f"Each job keeps its {self.keep_periodic} newest periodic checkpoints, every stop checkpoint (a move, "
            "a credit stop), the latest one (what it resumes from) and the final one (its trained model); a pass "
            f"every {self.prune_every_s} s deletes the others. Kept checkpoints stay until you delete them."
        )

    def as_dict(self) -> dict:
        return {"keep_periodic": self.keep_periodic, "prune_every_s": self.prune_every_s, "policy": self.policy}


def retention() -> Retention:
    prune = settings.CELERY_BEAT_SCHEDULE.get("prune-checkpoints", {}).get("schedule", 600)
    seconds = int(prune.total_seconds() if hasattr(prune, "total_seconds") else prune)
    return Retention(settings.CHECKPOINT_KEEP, seconds)


KEPT_BECAUSE = {
    FINAL: "kept: the final checkpoint (the trained model)",
    LATEST: "kept: the latest, which the job resumes from",
    STOP: "kept: saved for a stop",
    RECENT: "kept: one of the newest periodic checkpoints",
    PRUNABLE: "deleted by the next pruning pass (newer periodic checkpoints replace it)",
}


@dataclass(frozen=True)
class CheckpointEntry:
    row: JobCheckpoint
    kept: str  # FINAL, LATEST, STOP, RECENT or PRUNABLE
    deletable: bool  # all but the one a job that has not ended resumes from

    @property
    def kept_because(self) -> str:
        return KEPT_BECAUSE[self.kept]


def list_checkpoints(job: Job) -> list[CheckpointEntry]:
    """The job's recorded checkpoints, newest step first, each with why pruning keeps it (or that it won't)."""
    rows = [row for row in job.checkpoints.all() if is_own_checkpoint(job.pk, row.key)]
    keep = retention().keep_periodic
    kept = checkpoints_to_keep(job, rows, keep)
    latest = key_of(job.latest_checkpoint) if is_stored(job.latest_checkpoint) else None
    final = max(rows, key=lambda row: (row.step, row.pk)) if rows else None
    ended = job.status in JobStatus.finished()
    entries = []
    for row in sorted(rows, key=lambda row: (row.step, row.pk), reverse=True):
        if row.pk not in kept:
            reason = PRUNABLE
        elif row is final and ended:
            reason = FINAL
        elif row.key == latest:
            reason = LATEST
        elif row.stopping:
            reason = STOP
        else:
            reason = RECENT
        entries.append(CheckpointEntry(row, reason, deletable=ended or row.key != latest))
    return entries


def checkpoint_at(job: Job, step: int) -> JobCheckpoint:
    """The job's checkpoint at `step`; raises CheckpointNotFound naming the steps it has."""
    row = job.checkpoints.filter(step=step).order_by("-pk").first()
    if row is None or not is_own_checkpoint(job.pk, row.key):
        steps = sorted(job.checkpoints.values_list("step", flat=True))
        have = ", ".join(map(str, steps)) if steps else _("none")
        raise CheckpointNotFound(
            _("Job %(job)s has no checkpoint at step %(step)s (its checkpoints: %(have)s).")
            % {"job": job.pk, "step": step, "have": have}
        )
    return row


def delete_checkpoint(job: Job, step: int) -> None:
    """Delete the stored tree (manifest first) and the row. Refused with CheckpointInUse for the latest
    checkpoint of a job that has not ended (it is what the job resumes from after a move or a restart), and for
    the one a continuation that has not ended and has no checkpoint of its own starts from.
    Raises CheckpointNotFound, or StorageError when storage can't be written."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        row = checkpoint_at(job, step)
        latest = key_of(job.latest_checkpoint) if is_stored(job.latest_checkpoint) else None
        if row.key == latest and job.status not in JobStatus.finished():
            raise CheckpointInUse(
                _(
                    "Step %(step)s is the latest checkpoint of job %(job)s, which is %(status)s: it resumes from it "
                    "after a move or a restart. Delete it once the job has ended or saved a newer checkpoint."
                )
                % {"step": step, "job": job.pk, "status": job.get_status_display().lower()}
            )
        starting = (
            Job.objects.filter(start_checkpoint=row.key, latest_checkpoint="")
            .exclude(status__in=JobStatus.finished())
            .values_list("pk", flat=True)
            .first()
        )
        if starting is not None:
            raise CheckpointInUse(
                _(
                    "Job %(starting)s continues from step %(step)s of job %(job)s and has saved no checkpoint of its "
                    "own yet: it starts from this one. Delete it once that job has ended or saved a checkpoint."
                )
                % {"starting": starting, "step": step, "job": job.pk}
            )
        delete_tree(platform_store(), row.key)
        row.delete()


def checkpoint_download(job: Job, step: int, merged: bool = False) -> ModelDownload:
    """What `GET /jobs/{id}/checkpoints/{step}/download/` sends: the checkpoint's model/ (a LoRA job's adapter/,
    or with `merged` its merged model/). Raises CheckpointNotFound, MergedNotApplicable, CheckpointNotExported
    or StorageError."""
    lora = job.mode == TrainingMode.LORA
    if merged and not lora:
        raise MergedNotApplicable(merged_not_applicable())
    row = checkpoint_at(job, step)
    manifest = read_manifest(platform_store(), row.key)
    if manifest is None:
        raise CheckpointNotFound(
            _("Job %(job)s's checkpoint at step %(step)s is no longer stored.") % {"job": job.pk, "step": step}
        )
    exported = ExportedStep(row.key, manifest)
    which = ADAPTER_DIR if lora and not merged else MODEL_DIR
    files = exported.folder(which)
    if not files or (which == MODEL_DIR and "config.json" not in files):
        why = (
            _("merged weights are exported only with the final and stop checkpoints; download its adapter")
            if merged
            else _("it was saved without its Hugging Face form (by an older runtime, or by a stop asked to be quick)")
        )
        raise CheckpointNotExported(
            _("Job %(job)s's checkpoint at step %(step)s has no %(folder)s/ folder: %(why)s.")
            % {"job": job.pk, "step": step, "folder": which, "why": why}
        )
    folder = download_folder(job, which, step)
    return ModelDownload(
        f"{folder}.tar", platform_store(), f"{row.key}/{which}", files, model_card(job, which, exported.name, at=row)
    )
