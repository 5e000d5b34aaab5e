"""Islands end to end: real agents of three stacks, real ranks, the platform's Lighthouse, a host killed.

A run across simulated RTX 4090, TPU v5e and Ascend 910B trains as three islands in DiLoCo mode. The
TPU host dies (SIGKILL of its agent, whose rank dies with it): the platform notices the lost node and
lets that island leave in place; the other two never stop stepping. A new TPU host then enrolls and
joins the run as a new island, healed from a healthy one, and reports steps. The job trains to its
last step and succeeds, every allocation is billed to the second, and the leaver's work since its
last sync is refunded by training insurance.
"""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node
from tests.support.accounts import token_client
from tests.support.stack import platform_stack, wait_until
from workers.models import JobMetric, JobMigration

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOSTS = [("i-4090", "rtx-4090"), ("i-v5e", "tpu-v5e"), ("i-910b", "ascend-910b")]
SYNC_EVERY = 5
STEPS = 800  # long enough for a new host to enroll, start its rank and join
QUORUM_TIMEOUT_S = 30  # a leader's wait for a quorum or a peer (IslandLaunch.quorum_timeout_s)


@pytest.fixture
def stack(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    with platform_stack(live_server, settings, tmp_path, islands=True) as running:
        yield running


def explain(job_id: int):
    def text() -> str:
        job = Job.objects.get(pk=job_id)
        lines = [f"job {job_id}: {job.status} step {job.step} epoch {job.epoch}: {job.status_reason}"]
        lines += [f"  {e.created_at:%H:%M:%S.%f} {e.kind}: {e.message}" for e in job.events.all()]
        return "\n".join(lines)

    return text


def test_a_killed_islands_host_leaves_the_run_and_the_others_train_it_to_success(stack, alice):
    for hostname, chip in HOSTS:
        stack.add_agent(hostname, chip)
    wait_until(lambda: Node.objects.filter(agent_status=AgentStatus.ONLINE).count() == len(HOSTS), 60, "agents", stack)
    body = {
        "model": "llama-tiny",
        "per_device_batch_size": 2,
        "max_budget": "28",
        "max_steps": STEPS,
        "chip_counts": {chip: 1 for _, chip in HOSTS},
        "sync_mode": "diloco",
        "sync_every": SYNC_EVERY,
    }
    response = token_client(alice).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    why = explain(job_id)
    wait_until(
        lambda: Job.objects.filter(pk=job_id, step__gte=2 * SYNC_EVERY + 3).exists(), 240, "training", stack, why
    )
    job = Job.objects.get(pk=job_id)
    assert len(job.plan.islands()) == 3 and job.plan.bridge.mode == "diloco"
    tpu = Node.objects.get(hostname="i-v5e")
    [tpu_rank] = job.plan.ranks_on(tpu.pk)
    survivors = [rank for rank in range(job.plan.world_size) if rank != tpu_rank]

    stack.kill("agent-i-v5e")  # the host dies; its rank dies with its agent's pipes
    killed_at = time.time()

    left = wait_until(
        lambda: JobMigration.objects.filter(job_id=job_id, status="island_left").first(), 120, "the leave", stack, why
    )
    stack.add_agent("i-v5e-2", "tpu-v5e")  # a new host: it joins the run as island 3
    joined = wait_until(
        lambda: JobMetric.objects.filter(job_id=job_id, rank=job.plan.world_size).order_by("step").first(),
        120,
        "the new island's first step",
        stack,
        why,
    )
    done = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED]).first(),
        300,
        "the job to end",
        stack,
        why,
    )
    assert done.status == JobStatus.SUCCEEDED, why()
    assert left.reason == "lost_node" and left.nodes == ["i-v5e"]
    assert done.epoch == job.epoch  # never moved: the same placement trained to the end
    # The leaver's steps after its last landed sync are lost, and insurance pays for them: the platform
    # overlaps diloco's syncs, so that sync holds the work up to H steps before it, and the round in
    # flight when the host died is the leaver's loss too: at most 2H - 1 (+1 for a step under way).
    assert 0 <= left.steps_lost <= 2 * SYNC_EVERY
    assert left.refund > 0 or left.steps_lost == 0

    # The survivors kept stepping: no pause longer than the quorum timeout plus a step.
    for rank in survivors:
        times = list(
            JobMetric.objects.filter(job_id=job_id, rank=rank).order_by("step").values_list("created_at", "step_time_s")
        )
        after = [(at, step_s) for at, step_s in times if at.timestamp() >= killed_at - 1]
        assert after, f"rank {rank} stepped no more after the kill"
        gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(after, after[1:], strict=False)]
        slowest = max(step_s for _, step_s in times)
        assert max(gaps, default=0) <= QUORUM_TIMEOUT_S + slowest + 5, f"rank {rank} stood still {max(gaps):.1f}s"
        assert max(step for (step,) in JobMetric.objects.filter(job_id=job_id, rank=rank).values_list("step")) == STEPS

    # The newcomer trained from where the run stood when it joined, to the end, as island 3.
    newcomer = done.plan.world_size - 1
    assert [island["index"] for island in done.plan.islands()] == [0, 1, 2, 3] and newcomer == job.plan.world_size
    assert joined.step > left.step_at_notice
    assert JobMetric.objects.filter(job_id=job_id, rank=newcomer, step=STEPS).exists()
    assert done.events.filter(kind="island", message__contains="joined at step").exists()

    # Billed to the second: the leaver until its loss was noticed, the others until the end.
    for allocation in done.allocations.all():
        assert allocation.ended_at is not None
        assert 0 <= (allocation.ended_at - allocation.billed_through).total_seconds() < 1
    assert done.allocations.get(node=tpu).ended_at == left.notice_at
