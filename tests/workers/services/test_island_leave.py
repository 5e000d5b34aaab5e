"""An island leaves a run in place: its chips stop billing, the other islands train on, the job succeeds.

The agents' reports are played by hand so every number can be checked; the runtime's side (a killed
island's peers keep stepping under a real Lighthouse) is tests/hosts/runtime/test_islands_membership.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.services.ledger import balance_of
from fleet.choices import CommandStatus, JobStatus, MigrationReason, MigrationStatus
from fleet.models import Job
from kernel.spec import JobSpec
from workers.models import AgentCommand, JobMigration
from workers.services import lifecycle
from workers.services.lifecycle import submit as submit_job
from workers.services.node_lifecycle import reset_node
from workers.services.reports import accept_report
from workers.services.scheduling import schedule_waiting_jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]

CHIPS = {"rtx-4090": 2, "tpu-v5e": 1, "ascend-910b": 1}


@pytest.fixture
def run(enroll, fund, alice):
    """A running job of three islands on three simulated stacks, at step 10."""
    fund(alice, "100")
    nodes = {chip: enroll(f"{chip}-host", chip, chips=count)[0] for chip, count in CHIPS.items()}

    def start(**fields) -> tuple[Job, dict]:
        spec = {
            "model_name": "llama-tiny",
            "per_device_batch_size": 2,
            "max_steps": 20,
            "max_budget_per_hour": 28_000_000,
            "chip_counts": CHIPS,
            **fields,
        }
        job = submit_job(alice, JobSpec.from_dict(spec))
        job.refresh_from_db()
        assert job.status == JobStatus.PROVISIONING and job.plan.bridge is not None
        for step in (5, 10):
            report_all(job, nodes, lambda rank, step=step: metric(rank, step))
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING
        return job, nodes

    return start


def ranks_by_node(job: Job, nodes: dict) -> dict:
    return {chip: sorted(job.plan.ranks_on(node.pk)) for chip, node in nodes.items()}


def report_all(job: Job, nodes: dict, item, only=None) -> None:
    for chip, node in nodes.items():
        if only is None or chip in only:
            job.refresh_from_db()
            accept_report(node, job.pk, job.epoch, [item(rank) for rank in sorted(job.plan.ranks_on(node.pk))])


def metric(rank: int, step: int) -> dict:
    return {"kind": "metric", "rank": rank, "step": step, "loss": 3.0, "tokens_per_s": 100.0, "t": _t()}


def _t() -> float:
    return timezone.now().timestamp()


def test_a_lost_island_leaves_and_the_others_train_on_to_success(run, alice):
    job, nodes = run(sync_mode="step")
    tpu = nodes["tpu-v5e"]
    balance = balance_of(alice)
    now = timezone.now()

    move = lifecycle.reclaim(
        job.pk, MigrationReason.LOST_NODE, "no heartbeat", nodes=[tpu], notice_seconds=0, now=now, last_seen=now
    )

    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.epoch == 1  # no move: the same placement goes on
    assert move.status == MigrationStatus.ISLAND_LEFT and move.nodes == ["tpu-v5e-host"]
    assert move.steps_lost == 0 and move.refund == 0  # step mode: every reported step was synced
    ended = {a.node.hostname: a.ended_at for a in job.allocations.select_related("node")}
    assert ended["tpu-v5e-host"] == now and ended["rtx-4090-host"] is None and ended["ascend-910b-host"] is None
    stops = AgentCommand.objects.filter(job=job, type="stop", status=CommandStatus.PENDING)
    assert [(command.node_id, command.payload["grace_s"]) for command in stops] == [(tpu.pk, 0)]
    island = next(i for i in job.plan.islands() if "tpu-v5e" in i["chips"])
    assert job.island_stats[str(island["index"])]["left"] is True
    assert "left" in job.events.filter(kind="island").last().message

    # The killed island's rank exit says nothing about the job; the others finish it.
    report_all(job, nodes, lambda rank: {"kind": "exit", "rank": rank, "code": -9, "t": _t()}, only={"tpu-v5e"})
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    survivors = {"rtx-4090", "ascend-910b"}
    report_all(job, nodes, lambda rank: metric(rank, 20), only=survivors)
    report_all(job, nodes, lambda rank: {"kind": "exit", "rank": rank, "code": 0, "t": _t()}, only=survivors)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    # Billed per second: the leaver through its leave, the others through the end (the ledger audit checks the rest).
    for allocation in job.allocations.all():
        assert allocation.ended_at is not None
        assert timedelta(0) <= allocation.ended_at - allocation.billed_through < timedelta(seconds=1)
    assert job.allocations.get(node=tpu).ended_at == now
    assert balance_of(alice) <= balance


def test_in_diloco_the_leavers_work_since_its_last_sync_is_lost_and_refunded(run, alice):
    job, nodes = run(sync_mode="diloco", sync_every=5)
    tpu = nodes["tpu-v5e"]
    island = next(i for i in job.plan.islands() if "tpu-v5e" in i["chips"])
    [rank] = island["ranks"]
    sync = {"kind": "island", "rank": rank, "island": island["index"], "change": "sync", "step": 5, "t": _t()}
    accept_report(tpu, job.pk, job.epoch, [sync])
    accept_report(tpu, job.pk, job.epoch, [metric(rank, 8)])
    balance = balance_of(alice)
    later = timezone.now() + timedelta(seconds=30)

    move = lifecycle.reclaim(job.pk, MigrationReason.OUTBID, "a higher bid", nodes=[tpu], notice_seconds=30, now=later)

    assert move.status == MigrationStatus.ISLAND_LEFT
    assert move.steps_lost == 5  # steps 6-10 of its own, after its sync at step 5
    # Insurance pays the TPU island's chip (¥2.80/h on demand) over the time since its sync at step 5.
    assert move.lost_seconds >= 30 and move.refund_transaction is not None
    assert move.refund == pytest.approx(2_800_000 * move.lost_seconds / 3600, abs=2)
    assert balance_of(alice) > balance  # the refund, less the leaver's last seconds of billing
    assert JobMigration.objects.filter(job=job).count() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_an_overlapped_sync_holds_the_work_up_to_the_step_its_round_was_sent_at(run):
    """A diloco round that crossed while the islands trained lands H steps after it was sent: the leaver
    kept only the work up to the send, so the work since then is what it loses."""
    job, nodes = run(sync_mode="diloco", sync_every=5)
    tpu = nodes["tpu-v5e"]
    island = next(i for i in job.plan.islands() if "tpu-v5e" in i["chips"])
    [rank] = island["ranks"]
    landed = {"kind": "island", "rank": rank, "island": island["index"], "change": "sync", "step": 10, "t": _t()}
    accept_report(tpu, job.pk, job.epoch, [metric(rank, 5), {**landed, "round_step": 5}, metric(rank, 12)])
    later = timezone.now() + timedelta(seconds=30)

    move = lifecycle.reclaim(job.pk, MigrationReason.OUTBID, "a higher bid", nodes=[tpu], notice_seconds=30, now=later)

    assert move.status == MigrationStatus.ISLAND_LEFT
    assert move.steps_lost == 12 - 5  # steps 6-12: the round sent at step 10 never landed


def test_when_every_island_is_affected_the_job_moves_as_one_world_does(run):
    job, nodes = run(sync_mode="step")
    now = timezone.now()
    move = lifecycle.reclaim(
        job.pk,
        MigrationReason.LOST_NODE,
        "region down",
        nodes=list(nodes.values()),
        notice_seconds=0,
        now=now,
        last_seen=now,
    )
    job.refresh_from_db()
    assert move.status != MigrationStatus.ISLAND_LEFT
    # Back to the queue and, the scheduler running inline here, placed again with a new epoch.
    assert job.status == JobStatus.QUEUED or (job.status == JobStatus.PROVISIONING and job.epoch > 1)


def test_a_node_enrolled_after_an_island_left_joins_the_run_as_a_new_island(run, enroll):
    job, nodes = run(sync_mode="step")
    tpu = nodes["tpu-v5e"]
    reset_node(tpu.pk, by="the operator")  # lost: its island leaves, the node takes no more work
    job.refresh_from_db()
    assert job.migrations.get().status == MigrationStatus.ISLAND_LEFT
    before = job.plan
    left = next(island for island in before.islands() if "tpu-v5e" in island["chips"])

    new_tpu, _ = enroll("tpu-v5e-host-2", "tpu-v5e", chips=1)
    schedule_waiting_jobs()

    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.epoch == 1
    islands = job.plan.islands()
    [added] = [island for island in islands if island["index"] == 3]
    assert added["chips"] == {"tpu-v5e": 1} and added["batch"] == left["batch"]
    assert added["ranks"] == [before.world_size]  # numbered after every earlier rank
    assert job.island_stats[str(left["index"])]["replaced_by"] == 3
    allocation = job.allocations.get(node=new_tpu)
    assert allocation.ended_at is None and allocation.epoch == job.epoch
    [start] = AgentCommand.objects.filter(job=job, node=new_tpu, type="start")
    [launch] = start.payload["ranks"]
    assert launch["rank"] == 0 and launch["world_size"] == 1
    assert launch["island"]["index"] == 3 and launch["island"]["first_rank"] == before.world_size
    assert str(left["index"]) not in launch["island"]["batches"]  # the islands taking part, and itself
    assert "joins the run" in job.events.filter(kind="island").last().message
    # Its steps are the job's: reports from its rank are accepted.
    accept_report(new_tpu, job.pk, job.epoch, [metric(before.world_size, 12)])
    assert job.metrics.filter(rank=before.world_size, step=12).exists()
    schedule_waiting_jobs()  # nothing more is missing: no second island
    job.refresh_from_db()
    assert len(job.plan.islands()) == 4
