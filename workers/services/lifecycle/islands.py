"""An island leaves a run in place: its chips go, the other islands train on (docs/ISLANDS.md).

A run of islands doesn't move as a whole when some of its chips are reclaimed or lost. The islands
whose nodes are affected leave: their allocations end now (billing stops), their ranks are stopped
(killed at once for a lost node), and the others, kept in step by torchft, drop them from the next
quorum and go on. The job stays running at the same epoch. Only when every island taking part is
affected does the job move as a single world does (`moves.reclaim`).

What the leaving island trained since its last sync is lost: nothing but the step in flight in
`step` mode, at most H inner steps in `diloco`. Training insurance refunds those chips over that
time, and the move is recorded as a JobMigration in status `island_left` (one per leave).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max
from django.utils.translation import gettext_noop

from base.stored_text import StoredText, data_of, english
from billing.services.insurance import INSURANCE_MEMO, insurance_amount, pay_insurance
from fleet.choices import JobEventKind, MigrationReason, MigrationStatus, stored_label
from fleet.models import Allocation, Job
from kernel.money import format_money
from kernel.protocol import SYNC_DILOCO
from workers.models import JobMetric, JobMigration
from workers.services import allocations
from workers.services.events import record_event
from workers.services.lifecycle.ends import stop_ranks


def island_of_ranks(job: Job) -> dict[int, int]:
    """{job rank: island index} of a run of islands ({} for one world)."""
    if job.plan is None or job.plan.bridge is None:
        return {}
    return {rank: island["index"] for island in job.plan.islands() for rank in island["ranks"]}


def departed_ranks(job: Job) -> set[int]:
    """The job ranks of islands that left the run: their exits say nothing about the job."""
    left = {int(index) for index, figures in (job.island_stats or {}).items() if figures.get("left")}
    return {rank for rank, island in island_of_ranks(job).items() if island in left} if left else set()


def leave_in_place(
    job: Job,
    held: list[Allocation],
    affected: list[Allocation],
    reason: str,
    detail: str | StoredText,
    *,
    lost: bool,
    notice_seconds: int,
    last_seen: datetime | None,
    now: datetime,
) -> JobMigration | None:
    """Let the islands on the `affected` allocations' nodes leave (call under the job's row lock); None
    when that would leave no island taking part, or the job is one world: the caller moves the whole job."""
    islands = island_of_ranks(job)
    if not islands:
        return None
    plan = job.plan
    node_islands = {a.node_id: {islands[rank] for rank in plan.ranks_on(a.node_id)} for a in held}
    leaving = set().union(*(node_islands[a.node_id] for a in affected)) if affected else set()
    departed = {islands[rank] for rank in departed_ranks(job)}
    staying = set(islands.values()) - departed - leaving
    if not leaving or not staying:
        return None
    going = [a for a in held if node_islands[a.node_id] & leaving]
    hostnames = sorted({a.node.hostname for a in going})
    grace = 0 if lost else max(min(notice_seconds, 30), 5)
    why = f"{stored_label(MigrationReason(reason))}: {english(detail)}"
    stop_ranks(job, why, checkpoint=False, grace_s=grace, now=now, node_ids=sorted({a.node_id for a in going}))
    allocations.end_for_notice(going, now, hold_seconds=None if lost else notice_seconds)
    stats = dict(job.island_stats or {})
    for index in leaving:
        stats[str(index)] = {**stats.get(str(index), {}), "left": True, "left_reason": reason}
    job.island_stats = stats
    job.save(update_fields=["island_stats", "updated_at"])
    return _record_leave(job, going, sorted(leaving), reason, detail, hostnames, last_seen or now, now)


def _record_leave(
    job: Job,
    going: list[Allocation],
    leaving: list[int],
    reason: str,
    detail: str | StoredText,
    hostnames: list[str],
    work_end: datetime,
    now: datetime,
) -> JobMigration:
    """The leave's record: the leaving islands' work since their last sync, refunded by insurance."""
    ranks = [rank for rank, island in island_of_ranks(job).items() if island in leaving]
    reached = JobMetric.objects.filter(job=job, epoch=job.epoch, rank__in=ranks).aggregate(
        at=Max("created_at"), step=Max("step")
    )
    synced_step, synced_at = _last_sync(job, leaving, ranks)
    steps_lost = max(0, (reached["step"] or synced_step) - synced_step)
    lost_from = synced_at if steps_lost else None
    refund = insurance_amount(going, [], lost_from=lost_from, work_end=work_end, notice_at=now, resumed_at=now)
    move = JobMigration.objects.create(
        job=job,
        reason=reason,
        detail=english(detail),
        detail_text=data_of(detail),
        status=MigrationStatus.ISLAND_LEFT,
        from_epoch=job.epoch,
        to_epoch=job.epoch,
        nodes=hostnames,
        notice_at=now,
        notice_seconds=0,
        last_seen_at=reached["at"],
        step_at_notice=job.step,
        resumed_at=now,
        resume_step=job.step,
        steps_lost=steps_lost,
        lost_seconds=max(0.0, (work_end - lost_from).total_seconds()) if lost_from else 0.0,
        refund=refund,
    )
    if refund > 0:
        move.refund_transaction = pay_insurance(
            job.owner,
            refund,
            key=f"insurance:{move.pk}",
            memo=StoredText(INSURANCE_MEMO, job=job.pk, reason=StoredText(gettext_noop("island left"))),
            now=now,
        )
        move.save(update_fields=["refund_transaction"])
    names = ", ".join(str(index) for index in leaving)
    record_event(
        job,
        JobEventKind.ISLAND,
        StoredText(
            gettext_noop(
                "Island %(islands)s left (%(reason)s: %(hosts)s); the other islands train on. "
                "%(lost)s step(s) of its work lost; insurance refund %(refund)s"
            ),
            islands=names,
            reason=StoredText.label(MigrationReason(reason), case="lower"),
            hosts=", ".join(hostnames),
            lost=steps_lost,
            refund=format_money(refund),
        ),
        data={"migration": move.pk, "islands": leaving, "refund": refund, "steps_lost": steps_lost},
        now=now,
    )
    return move


def _last_sync(job: Job, leaving: list[int], ranks: list[int]) -> tuple[int, datetime | None]:
    """(step, time) of the leaving islands' last sync: every committed step in step mode, the last
    reported outer sync in diloco (the start of the run when none was reported)."""
    metrics = JobMetric.objects.filter(job=job, epoch=job.epoch, rank__in=ranks)
    if job.plan.bridge.mode != SYNC_DILOCO:
        newest = metrics.order_by("-step", "-created_at").first()
        return (newest.step, newest.created_at) if newest else (0, None)
    stats = job.island_stats or {}
    step = min((stats.get(str(index), {}).get("synced_step", 0) for index in leaving), default=0)
    at = metrics.filter(step=step).aggregate(at=Max("created_at"))["at"] if step else None
    if at is None:
        first = Allocation.objects.filter(job=job, epoch=job.epoch).order_by("started_at").first()
        at = first.started_at if first else None
    return step, at
