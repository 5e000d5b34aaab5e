"""Checkpoints in object storage: each one a job reports is recorded (JobCheckpoint), and a periodic pass
prunes what no resume or download needs and sweeps away what saves that crashed left behind.

Kept per job: the last CHECKPOINT_KEEP periodic checkpoints, every stopping one (a reclaim notice, a credit
stop: a job may resume from it, and it holds the exported model), the latest (what the next placement
resumes from) and the final one (the highest step, holding the trained model). The rest are deleted as
trees (manifest first: a tree is gone the moment its manifest is). Objects under
checkpoints/job-<id>/step-<n>/ (or its universal/) without a manifest are a save that crashed, or one
still uploading: they are deleted once their newest object is INCOMPLETE_AFTER old.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from fleet.models import Job
from kernel.storage import StorageError, Store
from kernel.storage.locations import is_stored, key_of
from kernel.storage.trees import MANIFEST, delete_tree, read_manifest
from workers.models import JobCheckpoint
from workers.services.storage import platform_store

logger = logging.getLogger(__name__)

CHECKPOINTS_PREFIX = "checkpoints"
UNIVERSAL = "universal"
INCOMPLETE_AFTER = timedelta(hours=1)


def job_checkpoints(job_id: int) -> str:
    """Where a job's checkpoints are kept in the platform's store: `checkpoints/job-<id>/step-<n>/` trees."""
    return f"{CHECKPOINTS_PREFIX}/job-{job_id}"


def is_own_checkpoint(job_id: int, key: str) -> bool:
    """Whether `key` names one of the job's checkpoint trees: `checkpoints/job-<id>/step-<n>`."""
    step = key.removeprefix(f"{job_checkpoints(job_id)}/step-")
    return step != key and step.isascii() and step.isdigit()


def own_checkpoint_key(job: Job, path: str | None) -> str | None:
    """The key of `path` when it is `store:` one of the job's own checkpoint trees, else None. Hosts are third
    parties (#28): what one reports is trusted only inside its job's prefix, so a report can never point the
    pruner or a resume at another user's objects."""
    if not is_stored(path):
        return None
    key = key_of(path)
    return key if is_own_checkpoint(job.pk, key) else None


def record_checkpoint(job: Job, item: dict, now: datetime) -> JobCheckpoint | None:
    """Record a reported checkpoint (a `store:` path; one on a shared disk is not pruned) with its train and
    held-out losses. A second report of the same tree marks it stopping if this one is, and fills in a loss
    the first lacked."""
    path = item.get("path") or ""
    if not is_stored(path):
        return None
    losses = {"loss": item.get("loss"), "eval_loss": item.get("eval_loss")}
    if losses["eval_loss"] is None:  # a runtime that reports no eval loss with its checkpoint: the step's eval
        losses["eval_loss"] = job.evals.filter(step=item["step"]).values_list("eval_loss", flat=True).first()
    row, created = JobCheckpoint.objects.get_or_create(
        job=job,
        key=key_of(path),
        defaults={
            "epoch": job.epoch,
            "step": item["step"],
            "stopping": bool(item.get("stopping")),
            "created_at": now,
            **losses,
        },
    )
    if not created:
        changed = {name: value for name, value in losses.items() if value is not None and getattr(row, name) is None}
        if item.get("stopping") and not row.stopping:
            changed["stopping"] = True
        if changed:
            for name, value in changed.items():
                setattr(row, name, value)
            row.save(update_fields=list(changed))
    return row


def checkpoints_to_keep(job: Job, rows: list[JobCheckpoint], keep_periodic: int) -> set[int]:
    """The ids of the job's checkpoints that pruning must leave alone."""
    periodic = sorted((row for row in rows if not row.stopping), key=lambda row: (row.step, row.pk))
    keep = {row.pk for row in periodic[len(periodic) - keep_periodic :]} if keep_periodic > 0 else set()
    keep |= {row.pk for row in rows if row.stopping}
    latest = key_of(job.latest_checkpoint) if is_stored(job.latest_checkpoint) else None
    keep |= {row.pk for row in rows if row.key == latest}
    if rows:
        final = max(rows, key=lambda row: (row.step, row.pk))
        keep |= {final.pk} | {row.pk for row in rows if row.step >= job.max_steps}
    return keep


@dataclass
class PruneReport:
    deleted: list[str] = field(default_factory=list)  # checkpoint keys whose trees were deleted
    incomplete: list[str] = field(default_factory=list)  # prefixes of crashed saves swept away
    sized: int = 0  # checkpoints whose size was filled in
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "deleted": len(self.deleted),
            "incomplete": len(self.incomplete),
            "sized": self.sized,
            "failed": self.failed,
        }


def prune_checkpoints(now: datetime | None = None, budget_s: float = 60.0) -> PruneReport:
    """One pass: prune each job's checkpoints, fill in sizes, sweep crashed saves; stops after `budget_s`
    (the next pass carries on)."""
    now = now or timezone.now()
    deadline = time.monotonic() + budget_s
    store, report = platform_store(), PruneReport()
    keep = settings.CHECKPOINT_KEEP
    crowded = (
        Job.objects.annotate(periodic=Count("checkpoints", filter=Q(checkpoints__stopping=False)))
        .filter(periodic__gt=max(keep, 0))
        .order_by("pk")
    )
    for job in crowded:
        rows = list(job.checkpoints.all())
        kept = checkpoints_to_keep(job, rows, keep)
        for row in rows:
            if row.pk not in kept and time.monotonic() < deadline:
                _delete(store, row, report)
    for row in JobCheckpoint.objects.filter(bytes__isnull=True).order_by("pk"):
        if time.monotonic() >= deadline:
            break
        _fill_size(store, row, report)
    if time.monotonic() < deadline:
        sweep_incomplete(store, now, report)
    return report


def _forgot_foreign(row: JobCheckpoint) -> bool:
    """A row naming a key outside its job's checkpoints (recorded from a host's report before reports were
    checked) is deleted, never what it names."""
    if is_own_checkpoint(row.job_id, row.key):
        return False
    logger.warning("checkpoint row %s names %s, outside job %s's checkpoints: forgotten", row.pk, row.key, row.job_id)
    row.delete()
    return True


def _delete(store: Store, row: JobCheckpoint, report: PruneReport) -> None:
    if _forgot_foreign(row):
        return
    try:
        delete_tree(store, row.key)
    except StorageError as error:
        logger.warning("pruning checkpoint %s failed: %s", row.key, error)
        report.failed += 1
        return
    row.delete()
    report.deleted.append(row.key)


def _fill_size(store: Store, row: JobCheckpoint, report: PruneReport) -> None:
    if _forgot_foreign(row):
        return
    try:
        manifest = read_manifest(store, row.key)
    except StorageError as error:
        logger.warning("reading checkpoint %s failed: %s", row.key, error)
        report.failed += 1
        return
    if manifest is not None:
        JobCheckpoint.objects.filter(pk=row.pk).update(bytes=manifest.size)
        report.sized += 1


@dataclass
class _Tree:
    complete: bool = False
    newest: float = 0.0


def sweep_incomplete(store: Store, now: datetime, report: PruneReport | None = None) -> list[str]:
    """Delete what crashed saves left: checkpoint trees without a manifest whose newest object is old."""
    report = report if report is not None else PruneReport()
    trees: dict[str, _Tree] = {}
    try:
        for item in store.list(CHECKPOINTS_PREFIX):
            prefix = checkpoint_tree(item.key)
            if prefix is None:
                continue
            tree = trees.setdefault(prefix, _Tree())
            tree.complete |= item.key == f"{prefix}/{MANIFEST}"
            tree.newest = max(tree.newest, item.modified)
    except StorageError as error:
        logger.warning("listing checkpoints failed: %s", error)
        report.failed += 1
        return report.incomplete
    cutoff = (now - INCOMPLETE_AFTER).timestamp()
    for prefix, tree in sorted(trees.items()):
        if tree.complete or tree.newest > cutoff:
            continue
        step = prefix.removesuffix(f"/{UNIVERSAL}")
        if prefix != step and step in trees and not trees[step].complete:
            continue  # goes with its incomplete checkpoint
        try:
            store.delete_prefix(prefix)
        except StorageError as error:
            logger.warning("deleting incomplete checkpoint %s failed: %s", prefix, error)
            report.failed += 1
            continue
        report.incomplete.append(prefix)
    return report.incomplete


def checkpoint_tree(key: str) -> str | None:
    """The tree an object under checkpoints/ belongs to: checkpoints/job-<id>/step-<n>[/universal], or None."""
    parts = key.split("/")
    if len(parts) < 4 or parts[0] != CHECKPOINTS_PREFIX or not parts[1].startswith("job-"):
        return None
    if not parts[2].startswith("step-"):
        return None
    if len(parts) > 4 and parts[3] == UNIVERSAL:
        return "/".join(parts[:4])
    return "/".join(parts[:3])


@shared_task(name="workers.tasks.prune_checkpoints", ignore_result=True, soft_time_limit=150)
def prune_checkpoints_task() -> dict[str, int]:
    """The beat's pruning pass over every job's checkpoints (CHECKPOINT_PRUNE_SECONDS)."""
    return prune_checkpoints().as_dict()
