"""A frozen node with real processes: real Celery worker and beat, real agents and DeepSpeed ranks.

The host running a job is frozen (its agent and rank SIGSTOPped) past the heartbeat deadline, is
declared lost, and the job resumes on another host from its checkpoint. Then the frozen host wakes
up (SIGCONT): its late reports are refused, its rank is killed, nothing after the loss is billed,
and the insurance refunds only the work really lost.
"""

from __future__ import annotations

import contextlib
import io
import signal
import time

import psutil
import pytest
from django.core.management import call_command
from django.db.models import Max

from billing.models import Transaction
from fleet.choices import AgentStatus
from fleet.models import Job, Node
from tests.support.accounts import token_client
from tests.support.stack import platform_stack, wait_until
from workers.models import JobMetric, JobMigration

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    with platform_stack(live_server, settings, tmp_path) as running:
        yield running


def host_processes(agent: psutil.Process) -> list[psutil.Process]:
    """The agent and everything it started (ranks, warm standbys): the whole host, as far as we play it."""
    return [agent, *agent.children(recursive=True)]


def signal_all(processes: list[psutil.Process], sig: int) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def online(*hostnames: str) -> bool:
    return Node.objects.filter(hostname__in=hostnames, agent_status=AgentStatus.ONLINE).count() == len(hostnames)


def test_a_frozen_node_that_wakes_up_is_fenced_killed_and_not_paid_twice(stack, alice, settings):
    agent = psutil.Process(stack.add_agent("frozen-a", "rtx-4090").pid)
    wait_until(lambda: online("frozen-a"), 60, "frozen-a to enroll", stack)
    api = token_client(alice)
    spec = {"model": "llama-tiny", "per_device_batch_size": 4, "policy": "cost-performance", "max_budget": "28",
            "max_steps": 400, "chip_counts": {"rtx-4090": 1}}  # fmt: skip
    response = api.post("/api/v1/jobs/", spec, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    wait_until(lambda: unsaved_steps(job_id) >= 3, 240, "a periodic checkpoint and a few steps after it", stack)
    # A second host, drained for now: the job has nowhere to go while the frozen one is away.
    stack.add_agent("frozen-b", "rtx-4090")
    wait_until(lambda: online("frozen-b"), 60, "frozen-b to enroll", stack)
    Node.objects.filter(hostname="frozen-b").update(agent_status=AgentStatus.DRAINING)

    frozen = host_processes(agent)
    [rank] = [p for p in frozen if f"job-{job_id}-epoch-" in p.cwd()]  # not the idle warm standbys
    signal_all(frozen, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        migration = wait_until(
            lambda: JobMigration.objects.filter(job_id=job_id, reason="lost_node").first(), 60, "the loss", stack
        )
        time.sleep(2)  # frozen a little past the loss: the job waits, re-planned nowhere yet
    finally:
        signal_all(frozen, signal.SIGCONT)
    woke_at = time.time()
    detected = migration.notice_at.timestamp() - frozen_at
    assert detected <= settings.AGENT_HEARTBEAT_DEADLINE_S + 10, f"lost after {detected:.1f}s"
    job = Job.objects.get(pk=job_id)
    assert job.status == "queued" and job.epoch == migration.from_epoch + 1  # fenced at the loss, not placed yet

    # Awake, its rank is killed (the kill queued for it, or its first refused report); the host is
    # back in service only once the rank is gone.
    def rank_gone() -> bool:
        assert not (alive(rank) and online("frozen-a")), "frozen-a back in service beside its fenced rank"
        return not alive(rank)

    wait_until(rank_gone, 30, "the woken rank to be killed", stack)
    killed_after = time.time() - woke_at
    wait_until(lambda: "is stale" in stack.log("agent-frozen-a"), 30, "a late report refused (409)", stack)
    # Nothing the woken rank said after the loss was taken, and its chips were billed up to the loss only.
    reported = JobMetric.objects.filter(job=job, epoch=migration.from_epoch).aggregate(last=Max("step"))["last"]
    assert reported == migration.step_at_notice
    assert Job.objects.get(pk=job_id).step == migration.step_at_notice
    old = job.allocations.get(epoch=migration.from_epoch)
    assert old.node.hostname == "frozen-a" and old.ended_at == migration.notice_at
    assert old.billed_through <= migration.notice_at

    Node.objects.filter(hostname="frozen-b").update(agent_status=AgentStatus.ONLINE)
    migration = wait_until(
        lambda: JobMigration.objects.filter(pk=migration.pk, status="resumed").first(), 180, "the resume", stack
    )
    # Resumed from the checkpoint, with a fresh epoch past the fenced one.
    assert migration.to_epoch == migration.from_epoch + 2
    resumed_on = job.allocations.get(epoch=migration.to_epoch).node.hostname
    assert migration.resume_step == migration.checkpoint_step + 1
    # The insurance covers the work really lost: the steps reported before the loss, and the time from
    # the checkpoint to the last sign of work (heartbeat or reported step), not to the detection.
    assert migration.steps_lost == reported - migration.checkpoint_step
    last_step_at = JobMetric.objects.get(job=job, epoch=migration.from_epoch, rank=0, step=reported).created_at
    assert last_step_at <= migration.last_seen_at < migration.notice_at
    assert (migration.notice_at - migration.last_seen_at).total_seconds() >= settings.AGENT_HEARTBEAT_DEADLINE_S / 2
    lost_window = max(0.0, (migration.last_seen_at - migration.checkpoint_at).total_seconds())
    assert migration.lost_seconds == pytest.approx(lost_window, abs=1e-3)
    assert migration.refund > 0  # at least the new chips' start-up
    assert Transaction.objects.get(idempotency_key=f"insurance:{migration.pk}").kind == "refund"
    print(
        f"\nfrozen node: lost {detected:.1f}s after the freeze, rank killed {killed_after:.1f}s after waking; "
        f"resumed on {resumed_on}; steps lost {migration.steps_lost}, lost {migration.lost_seconds:.2f}s, "
        f"refund {migration.refund} micros"
    )
    api.post(f"/api/v1/jobs/{job_id}/cancel/")


def unsaved_steps(job_id: int) -> int:
    """Steps reported since the latest checkpoint (-1 before the first one)."""
    job = Job.objects.get(pk=job_id)
    return -1 if job.latest_checkpoint_step is None else job.step - job.latest_checkpoint_step
