"""What agents report about their ranks: metrics, logs, checkpoints and exits.

Reports from an older epoch (a placement the job has moved on from) are refused, so a stale
rank can never write into the newer placement.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from fleet.choices import JobEventKind, JobStatus, MigrationStatus
from fleet.models import Allocation, Job, Node
from kernel.protocol import ReportKind
from workers.models import JobCheckpoint, JobEval, JobLogLine, JobMetric, RankExit
from workers.services import lifecycle
from workers.services.allocations import release_leaving_chips
from workers.services.checkpoints import job_checkpoints, own_checkpoint_key, record_checkpoint
from workers.services.events import record_event
from workers.services.island_reports import record_island
from workers.services.lifecycle.islands import departed_ranks
from workers.services.redaction import redact
from workers.services.replicas import record_serving
from workers.services.throughput import remember_throughput

MAX_LOG_LINE = 2000


class StaleEpoch(Exception):
    """The report belongs to a placement the job has moved on from."""


class ReportRejected(Exception):
    """A report that doesn't fit the job (wrong node, malformed item); `code` names which (the 400's code)."""

    def __init__(self, message: str, code: str = "report_rejected") -> None:
        super().__init__(message)
        self.code = code


def accept_report(node: Node, job_id: int, epoch: int, items: list[dict], now=None) -> int:
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise ReportRejected(f"Unknown job {job_id}.")
        stale = epoch != job.epoch
        if stale and epoch < job.epoch and any(item.get("kind") == ReportKind.EXIT for item in items):
            release_leaving_chips(job, epoch, node, now)  # the old placement's ranks are leaving this node
    if stale:
        raise StaleEpoch(f"Job {job_id} is at epoch {job.epoch}; epoch {epoch} is stale.")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if epoch != job.epoch:
            raise StaleEpoch(f"Job {job_id} is at epoch {job.epoch}; epoch {epoch} is stale.")
        if not Allocation.objects.filter(job=job, epoch=epoch, node=node).exists():
            raise ReportRejected(f"Node {node.hostname} holds no chips of job {job_id} epoch {epoch}.")
        ranks_here = _ranks_on(job, node)
        for item in items:
            if item.get("rank") not in ranks_here:
                raise ReportRejected(f"Rank {item.get('rank')} of job {job_id} does not run on {node.hostname}.")
            if item["kind"] == ReportKind.CHECKPOINT:
                _check_checkpoint_path(job, item)
            if item["kind"] == ReportKind.SERVING:
                _check_serving_url(node, item)
        _apply(job, node, items, now)
    return len(items)


def _check_checkpoint_path(job: Job, item: dict) -> None:
    """A host may name only the checkpoint its ranks were told to write: the reported step's tree under the
    job's own prefix. Anything else is refused before any item of the report is applied."""
    expected = f"{job_checkpoints(job.pk)}/step-{item['step']}"
    if own_checkpoint_key(job, item["path"]) != expected:
        raise ReportRejected(
            f"A checkpoint of job {job.pk} at step {item['step']} is stored at store:{expected}, "
            f"not {str(item['path'])[:200]!r}.",
            "checkpoint_outside_job",
        )


def _check_serving_url(node: Node, item: dict) -> None:
    """A replica answers on its own node's address: a host can't point the gateway anywhere else (the
    platform's own services, another customer's replica)."""
    url, address = item.get("url") or "", node.address or "127.0.0.1"
    if url and urlsplit(url).hostname != address:
        raise ReportRejected(
            f"A replica on {node.hostname} answers at its node's address ({address}), not at {url[:200]}.",
            "serving_url_outside_node",
        )


def _ranks_on(job: Job, node: Node) -> set[int]:
    return job.plan.ranks_on(node.pk) if job.plan else set()


def _apply(job: Job, node: Node, items: list[dict], now) -> None:
    metrics = [item for item in items if item["kind"] == ReportKind.METRIC]
    logs = [item for item in items if item["kind"] == ReportKind.LOG]
    if metrics:
        _record_metrics(job, node, metrics, now)
    if logs:
        JobLogLine.objects.bulk_create(
            [
                JobLogLine(
                    job=job,
                    epoch=job.epoch,
                    rank=item["rank"],
                    line=redact(str(item["line"]))[:MAX_LOG_LINE],
                    created_at=_time(item, now),
                )
                for item in logs
            ]
        )
    for item in items:
        if item["kind"] == ReportKind.CHECKPOINT:
            _record_checkpoint(job, item, now)
        elif item["kind"] == ReportKind.EVAL:
            _record_eval(job, item, now)
        elif item["kind"] == ReportKind.ISLAND:
            record_island(job, item, now, node)
        elif item["kind"] == ReportKind.SERVING and job.deployment_id:
            record_serving(job, item, now, node)
        elif item["kind"] == ReportKind.EXIT:
            _record_exit(job, item, now)
            if job.migrations.filter(from_epoch=job.epoch).exists():
                release_leaving_chips(job, job.epoch, node, now)


def _record_metrics(job: Job, node: Node, metrics: list[dict], now) -> None:
    chip = node.pool.chip_type.slug
    JobMetric.objects.bulk_create(
        [
            JobMetric(
                job=job,
                epoch=job.epoch,
                rank=m["rank"],
                step=m["step"],
                loss=m["loss"],
                tokens_per_s=m.get("tokens_per_s") or 0,
                step_time_s=m.get("step_time_s") or 0,
                samples_seen=m.get("samples_seen") or 0,
                memory_mb=m.get("memory_mb") or 0,
                chip_type=chip,
                created_at=_time(m, now),
            )
            for m in metrics
        ],
        ignore_conflicts=True,
    )
    newest = max(metrics, key=lambda m: m["step"])
    if job.status == JobStatus.PROVISIONING or newest["step"] >= job.step:  # a resumed placement restarts the count
        job.step = newest["step"]
        job.loss = newest["loss"]
        job.tokens = job.step * job.plan.tokens_per_step
    if job.first_loss is None:
        job.first_loss = min(metrics, key=lambda m: m["step"])["loss"]
    job.tokens_per_s = _aggregate_tokens_per_s(job)
    job.save(update_fields=["step", "loss", "tokens", "first_loss", "tokens_per_s", "updated_at"])
    lifecycle.start_running(job, min(m["step"] for m in metrics), now)


def _aggregate_tokens_per_s(job: Job) -> float:
    """The job's speed: the sum of each rank's latest measured tokens/s."""
    latest = (
        JobMetric.objects.filter(job=job, epoch=job.epoch)
        .order_by("rank", "-step")
        .distinct("rank")
        .values_list("tokens_per_s", flat=True)
    )
    return float(sum(latest))


def _record_eval(job: Job, item: dict, now) -> None:
    """A held-out loss; the newest step's is the job's eval_loss (a resumed placement may repeat a step)."""
    if item.get("eval_loss") is None:
        return
    JobEval.objects.update_or_create(
        job=job,
        step=item["step"],
        defaults={
            "epoch": job.epoch,
            "eval_loss": item["eval_loss"],
            "eval_tokens": item.get("eval_tokens") or 0,
            "created_at": _time(item, now),
        },
    )
    # An eval after its step's checkpoint was reported (the end's eval follows the last save): the checkpoint's.
    JobCheckpoint.objects.filter(job=job, step=item["step"], eval_loss__isnull=True).update(eval_loss=item["eval_loss"])
    newest = job.evals.order_by("-step").values_list("eval_loss", flat=True).first()
    if newest != job.eval_loss:
        job.eval_loss = newest
        job.save(update_fields=["eval_loss", "updated_at"])


def _record_checkpoint(job: Job, item: dict, now) -> None:
    record_checkpoint(job, item, _time(item, now))  # for pruning, even an older step's: it is stored
    if job.latest_checkpoint_step is not None and item["step"] < job.latest_checkpoint_step:
        return
    job.latest_checkpoint = item["path"]
    job.latest_checkpoint_step = item["step"]
    job.latest_checkpoint_at = _time(item, now)
    job.save(update_fields=["latest_checkpoint", "latest_checkpoint_step", "latest_checkpoint_at", "updated_at"])
    if job.status == JobStatus.MIGRATING and item.get("stopping"):  # the notice's checkpoint: move on at once
        transaction.on_commit(lambda: lifecycle.resume(job.pk, release=False))
    record_event(
        job,
        JobEventKind.CHECKPOINTED,
        StoredText(gettext_noop("Checkpoint at step %(step)s"), step=item["step"]),
        data={"path": item["path"], "seconds": item.get("seconds")},
        now=now,
    )


def _record_exit(job: Job, item: dict, now) -> None:
    try:
        with transaction.atomic():
            RankExit.objects.create(
                job=job,
                epoch=job.epoch,
                rank=item["rank"],
                code=item["code"],
                error=redact(str(item.get("error") or ""))[-8000:],
                created_at=now,
            )
    except IntegrityError:
        return  # a re-sent exit report
    if job.is_finished:
        return
    departed = departed_ranks(job)
    if item["rank"] in departed:
        return  # an island that left the run: the others go on without it
    if job.status == JobStatus.MIGRATING:
        # Leaving reclaimed chips: once every rank of this placement is gone, the job moves on.
        if RankExit.objects.filter(job=job, epoch=job.epoch).count() == job.plan.world_size:
            lifecycle.resume(job.pk, now=now)
        return
    if job.migrations.filter(from_epoch=job.epoch).exclude(status=MigrationStatus.ISLAND_LEFT).exists():
        return  # moved on from its checkpoint already; the chips were let go as the ranks left
    if item["code"] != 0:
        lifecycle.finish_after_crash(job, _crash_reason(item), now)
        # Otherwise it may be a crash, or a peer whose host died: the job fails once every one of its
        # nodes has shown it is alive after this exit (monitor.fail_jobs_with_crashed_ranks); a node
        # that never does is declared lost and the job moves instead.
        return
    expected = set(range(job.plan.world_size)) - departed
    if job.step >= job.max_steps:  # an island added too late to take a step has nothing to wait for
        stepped = set(JobMetric.objects.filter(job=job, epoch=job.epoch).values_list("rank", flat=True).distinct())
        expected &= stepped
    done = set(RankExit.objects.filter(job=job, epoch=job.epoch, code=0).values_list("rank", flat=True))
    if expected <= done:
        if job.step >= job.max_steps and not job.cancel_requested_at:
            remember_throughput(job, now)  # a whole run's measured speed feeds the next quotes
        lifecycle.finish_when_ranks_done(job, now)


def _crash_reason(item: dict) -> StoredText:
    last = _last_line(redact(str(item.get("error") or "")))
    return StoredText(
        gettext_noop("Rank %(rank)s exited with code %(code)s: %(error)s"),
        rank=item["rank"],
        code=item["code"],
        error=last or StoredText(gettext_noop("no error output")),
    )


def crash_reason(exit: RankExit) -> StoredText:
    return _crash_reason({"rank": exit.rank, "code": exit.code, "error": exit.error})


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _time(item: dict, now) -> datetime:
    t = item.get("t")
    return datetime.fromtimestamp(float(t), tz=UTC) if isinstance(t, int | float) else now
