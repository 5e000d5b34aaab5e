"""Spot reclaim and hot migration through the services, with the agents' reports played by hand.

The end-to-end test with real agents and training ranks is tests/system/runs/test_spot_run.py; here each
step is driven explicitly so every number can be checked exactly.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import SpotPrice, Transaction
from billing.services.ledger import balance_of
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job, Node
from kernel.spec import JobSpec
from market.models import Bid, BidStatus
from market.services.clearing import clear_chip_type
from market.signals import spot_chips_lost
from workers.models import AgentCommand
from workers.receivers import move_jobs_off_lost_spot_chips
from workers.services.lifecycle import submit as submit_job
from workers.services.monitor import reconcile
from workers.services.node_lifecycle import record_heartbeat
from workers.services.reports import accept_report
from workers.services.scheduling import schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


@pytest.fixture
def funded(fund, alice, bob):
    fund(alice, "100")
    fund(bob, "100")


def spot_job(owner, bid: str, **fields) -> Job:
    from kernel.money import to_micros

    spec = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 100,
        "max_budget_per_hour": 28_000_000,
        "spot": True,
        "spot_bid_per_hour": to_micros(bid),
        "allow_on_demand": False,
        **fields,
    }
    return submit_job(owner, JobSpec.from_dict(spec))


def report(job: Job, node: Node, *items) -> None:
    job.refresh_from_db()
    accept_report(node, job.pk, job.epoch, [dict(item) for item in items])


def metric(rank: int, step: int, loss: float = 3.0):
    return {"kind": "metric", "rank": rank, "step": step, "loss": loss, "tokens_per_s": 100.0, "t": _t()}


def _t() -> float:
    return timezone.now().timestamp()


def test_a_higher_bid_takes_the_chips_and_the_job_resumes_elsewhere_from_its_checkpoint(enroll, funded, alice, bob):
    spot_4090, _ = enroll("spot-4090", "rtx-4090", chips=2, spot=True)
    job = spot_job(alice, "0.80")
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING
    old = job.allocations.get()
    assert (old.node, old.mode, old.chips) == (spot_4090, AllocationMode.SPOT, 2)
    assert Bid.objects.get(job=job).won_chips == 2

    report(job, spot_4090, metric(0, 1), metric(1, 1), metric(0, 7), metric(1, 7))
    # Bob outbids alice for the same chips; a 910B node joins, so alice has somewhere to go.
    rival = spot_job(bob, "1.00")
    spot_910b, _ = enroll("spot-910b", "ascend-910b", chips=1, spot=True)

    job.refresh_from_db()
    migration = job.migrations.get()
    assert job.status == JobStatus.MIGRATING and migration.reason == "outbid"
    assert Bid.objects.get(job=rival).won_chips == 2 and Bid.objects.get(job=job).won_chips == 0
    stop = AgentCommand.objects.get(job=job, type="stop")
    assert stop.payload["checkpoint"] is True and stop.node == spot_4090
    old.refresh_from_db()
    assert old.ended_at == migration.notice_at  # billing of the old chips stops at the notice
    billed_seconds = (old.billed_through - old.started_at).total_seconds()
    assert billed_seconds == int((migration.notice_at - old.started_at).total_seconds())
    assert Allocation.objects.holding(timezone.now()).filter(pk=old.pk).exists()  # still leaving

    # The ranks checkpoint at step 8 and leave.
    report(
        job,
        spot_4090,
        metric(0, 8),
        metric(1, 8),
        {
            "kind": "checkpoint",
            "rank": 0,
            "step": 8,
            "path": f"store:checkpoints/job-{job.pk}/step-8",
            "seconds": 0.1,
            "stopping": True,
            "t": _t(),
        },
        {"kind": "exit", "rank": 0, "code": 0, "t": _t()},
        {"kind": "exit", "rank": 1, "code": 0, "t": _t()},
    )
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING, job.status_reason
    new = job.allocations.get(epoch=job.epoch)
    assert new.node == spot_910b and new.mode == AllocationMode.SPOT
    start = AgentCommand.objects.get(job=job, epoch=job.epoch, type="start")
    launch = start.payload["ranks"][0]
    assert launch["resume_from"] == f"store:checkpoints/job-{job.pk}/step-8" and launch["world_size"] == 1
    assert job.plan.global_batch == 8  # pinned: the optimisation goes on with the same batch

    # Bob gets the 4090s he won, once alice's ranks are gone.
    schedule(rival.pk)
    rival.refresh_from_db()
    assert rival.allocations.get().node == spot_4090

    before = balance_of(alice)
    report(job, spot_910b, metric(0, 9, loss=2.9))
    job.refresh_from_db()
    migration.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert (migration.status, migration.checkpoint_step, migration.resume_step) == ("resumed", 8, 9)
    assert migration.steps_lost == 0 and migration.lost_seconds == 0
    assert migration.refund > 0
    refund = Transaction.objects.get(idempotency_key=f"insurance:{migration.pk}")
    assert refund.kind == TransactionKind.REFUND
    assert balance_of(alice) == before + migration.refund


def test_a_lost_node_moves_its_job_from_the_last_periodic_checkpoint_and_refunds_the_lost_work(
    enroll, funded, alice, settings
):
    first, _ = enroll("spot-a", "rtx-4090", chips=1, spot=True)
    job = spot_job(alice, "0.80")
    job.refresh_from_db()
    report(
        job,
        first,
        metric(0, 10),
        {
            "kind": "checkpoint",
            "rank": 0,
            "step": 10,
            "path": f"store:checkpoints/job-{job.pk}/step-10",
            "seconds": 0.1,
            "t": _t(),
        },
        metric(0, 14),
    )
    job.refresh_from_db()
    last_heartbeat = job.latest_checkpoint_at + timedelta(seconds=4)
    record_heartbeat(first, {}, now=last_heartbeat)  # then the node falls silent
    noticed = last_heartbeat + timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1)
    second, _ = enroll("spot-b", "rtx-4090", chips=1, spot=True)
    record_heartbeat(second, {}, now=noticed)
    reconcile(now=noticed)
    job.refresh_from_db()
    migration = job.migrations.get()
    assert migration.reason == "lost_node" and migration.nodes == ["spot-a"]
    assert job.status == JobStatus.PROVISIONING and job.allocations.get(epoch=job.epoch).node == second
    assert AgentCommand.objects.get(job=job, epoch=job.epoch, type="start").payload["ranks"][0]["resume_from"] == (
        f"store:checkpoints/job-{job.pk}/step-10"
    )
    report(job, second, metric(0, 11))
    migration.refresh_from_db()
    assert migration.steps_lost == 4  # steps 11-14 ran on the lost node after the checkpoint
    # From the checkpoint to the node's last heartbeat, not to the moment the loss was noticed.
    assert migration.lost_seconds == pytest.approx(4.0, abs=1e-3) and migration.refund > 0


def test_cancelling_the_bid_of_a_running_job_moves_it_off_those_chips(enroll, funded, alice):
    node, _ = enroll("spot-c", "rtx-4090", chips=1, spot=True)
    job = spot_job(alice, "0.80")
    bid = Bid.objects.get(job=job)
    from market.services.bids import cancel_bid

    cancel_bid(bid)
    job.refresh_from_db()
    assert bid.__class__.objects.get(pk=bid.pk).status == BidStatus.CANCELLED
    assert job.status == JobStatus.MIGRATING
    assert job.migrations.get().reason == "bid_cancelled"


def test_on_demand_work_reclaims_the_lowest_bid_first(enroll, funded, alice, bob, make_user, fund):
    enroll("spot-d", "rtx-4090", chips=1, spot=True)
    low = spot_job(alice, "0.60")
    enroll("spot-e", "rtx-4090", chips=1, spot=True)
    high = spot_job(bob, "0.90")
    carol = make_user("carol")
    fund(carol, "100")
    on_demand = submit_job(
        carol, JobSpec(model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=2_000_000)
    )
    on_demand.refresh_from_db()
    low.refresh_from_db()
    high.refresh_from_db()
    assert on_demand.status == JobStatus.QUEUED and on_demand.waiting_for == {"rtx-4090": 1}
    assert low.status == JobStatus.MIGRATING and low.migrations.get().reason == "on_demand"
    assert high.status == JobStatus.PROVISIONING


def test_clearing_records_the_price_only_when_the_market_changes(enroll, funded, alice):
    enroll("spot-f", "rtx-4090", chips=2, spot=True)
    chip = ChipType.objects.get(slug="rtx-4090")
    clear_chip_type(chip.pk)
    clear_chip_type(chip.pk)
    assert SpotPrice.objects.filter(chip_type=chip).count() == 1
    assert SpotPrice.objects.get(chip_type=chip).price_per_hour == 500_000  # everything fits: the floor
    spot_job(alice, "0.80")
    rows = list(SpotPrice.objects.filter(chip_type=chip).order_by("at"))
    assert [r.allocated for r in rows] == [0, 2]


def test_draining_a_node_lets_its_spot_jobs_finish_instead_of_reclaiming_them(enroll, funded, alice):
    node, _ = enroll("spot-g", "rtx-4090", chips=2, spot=True)
    job = spot_job(alice, "0.80")
    Node.objects.filter(pk=node.pk).update(agent_status="draining")
    result = clear_chip_type(ChipType.objects.get(slug="rtx-4090").pk)
    job.refresh_from_db()
    assert result.capacity == 2 and result.awards == {Bid.objects.get(job=job).pk: 2}
    assert job.status == JobStatus.PROVISIONING and not job.migrations.exists()


@contextmanager
def reactions_lost(signal, receiver, dispatch_uid: str):
    """The worker that should act on `signal` dies between the commit and the action: nobody receives it."""
    signal.disconnect(dispatch_uid=dispatch_uid)
    try:
        yield
    finally:
        signal.connect(receiver, dispatch_uid=dispatch_uid)


def test_a_reclaim_lost_with_the_worker_that_should_act_on_it_is_made_at_the_next_clearing(enroll, funded, alice, bob):
    enroll("spot-g", "rtx-4090", chips=1, spot=True)
    job = spot_job(alice, "0.80")
    with reactions_lost(spot_chips_lost, move_jobs_off_lost_spot_chips, "workers.move_jobs_off_lost_spot_chips"):
        rival = spot_job(bob, "1.00")  # the clearing commits bob's win; its announcement reaches nobody
    job.refresh_from_db()
    assert Bid.objects.get(job=rival).won_chips == 1
    assert job.status == JobStatus.PROVISIONING and not job.migrations.exists()

    clear_chip_type(ChipType.objects.get(slug="rtx-4090").pk)  # the beat's next clearing

    job.refresh_from_db()
    assert job.status == JobStatus.MIGRATING and job.migrations.get().reason == "outbid"
