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
from tests.conftest import token_client
from tests.e2e.stack import platform_stack, wait_until
from workers.choices import AgentStatus
from workers.models import Job, JobMetric, JobMigration, Node

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
    stack.add_agent("frozen-b", "rtx-4090")
    wait_until(lambda: online("frozen-b"), 60, "frozen-b to enroll", stack)

    frozen = host_processes(agent)
    ranks = [p for p in frozen if f"job-{job_id}-epoch-" in p.cwd()]  # not the idle warm standbys
    assert len(ranks) == 1
    signal_all(frozen, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        migration = wait_until(
            lambda: JobMigration.objects.filter(job_id=job_id, status="resumed").first(), 180, "the resume", stack
        )
    finally:
        signal_all(frozen, signal.SIGCONT)
    woke_at = time.time()

    assert migration.reason == "lost_node" and migration.nodes == ["frozen-a"]
    detected = migration.notice_at.timestamp() - frozen_at
    assert detected <= settings.AGENT_HEARTBEAT_DEADLINE_S + 10, f"lost after {detected:.1f}s"
    # Its rank is killed once it wakes up (the kill queued for it, or its first refused report).
    wait_until(lambda: not any(alive(rank) for rank in ranks), 30, "the woken rank to be killed", stack)
    assert time.time() - woke_at < 30
    wait_until(lambda: "is stale" in stack.log("agent-frozen-a") or online("frozen-a"), 30, "the fence", stack)
    wait_until(lambda: online("frozen-a"), 60, "frozen-a back in service once its rank is gone", stack)

    job = Job.objects.get(pk=job_id)
    # Nothing the woken rank said after the loss was taken.
    reported = JobMetric.objects.filter(job=job, epoch=migration.from_epoch).aggregate(last=Max("step"))["last"]
    assert reported == migration.step_at_notice
    # Billed up to the moment of loss, not a second more.
    old = job.allocations.get(epoch=migration.from_epoch)
    assert old.node.hostname == "frozen-a" and old.ended_at == migration.notice_at
    assert old.billed_through <= migration.notice_at
    # Resumed on the other host from the checkpoint, with a fresh epoch past the fenced one.
    assert migration.to_epoch == migration.from_epoch + 2
    assert job.allocations.get(epoch=migration.to_epoch).node.hostname == "frozen-b"
    assert migration.resume_step == migration.checkpoint_step + 1
    # The insurance covers the work really lost: steps reported before the loss, time to the last heartbeat.
    assert migration.steps_lost == reported - migration.checkpoint_step
    assert migration.last_seen_at <= migration.notice_at
    lost_window = max(0.0, (migration.last_seen_at - migration.checkpoint_at).total_seconds())
    assert migration.lost_seconds == pytest.approx(lost_window, abs=1e-3)
    assert (migration.notice_at - migration.last_seen_at).total_seconds() >= settings.AGENT_HEARTBEAT_DEADLINE_S
    if migration.refund:
        refund = Transaction.objects.get(idempotency_key=f"insurance:{migration.pk}")
        assert refund.kind == "refund"
    print(
        f"\nfrozen node: detected after {detected:.1f}s, rank killed {time.time() - woke_at:.1f}s after waking; "
        f"steps lost {migration.steps_lost}, lost {migration.lost_seconds:.2f}s, refund {migration.refund} micros"
    )
    api.post(f"/api/v1/jobs/{job_id}/cancel/")


def unsaved_steps(job_id: int) -> int:
    """Steps reported since the latest checkpoint (-1 before the first one)."""
    job = Job.objects.get(pk=job_id)
    return -1 if job.latest_checkpoint_step is None else job.step - job.latest_checkpoint_step
