"""Spot end to end: real Celery worker and beat, real agents, real DeepSpeed ranks, real checkpoints.

A spot run trains; another user's higher bid takes its chips; the run checkpoints on notice, moves
to other chips (another chip type, another world size), resumes from the checkpoint step with the
loss where it was, the old chips stop billing at the notice, and training insurance is refunded.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db.models import Max, Min

from billing.models import SpotPrice, Transaction
from fleet.choices import AgentStatus, AllocationMode, JobStatus
from fleet.models import Job, Node
from market.models import Bid
from tests.support.accounts import token_client
from tests.support.hfmodels import make_model_dir
from tests.support.stack import platform_stack, wait_until
from workers.models import JobMetric, JobMigration

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(live_server, settings, tmp_path, alice, bob, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    fund(bob)
    with platform_stack(live_server, settings, tmp_path) as running:
        yield running


def record(scenario: str, migration: JobMigration, **extra) -> None:
    """Print the migration's timeline; bench/spot_migration.py collects it through STARVERSE_BENCH_RECORD."""
    job, notice = migration.job, migration.notice_at
    timeline = {
        event.kind: round((event.created_at - notice).total_seconds(), 2)
        for event in job.events.filter(created_at__gte=notice).order_by("-created_at")
    }
    placed = job.events.filter(kind="placed", epoch=migration.to_epoch).first()
    startup = [
        f"+{(line.created_at - placed.created_at).total_seconds():.1f}s {line.line}"
        for line in job.log_lines.filter(epoch=migration.to_epoch)
        if "took" in line.line or "ready in" in line.line
    ]
    result = {
        "scenario": scenario,
        "notice_to_resumed_s": round(migration.downtime_seconds, 2),
        "timeline_s": timeline,
        "steps_lost": migration.steps_lost,
        "lost_seconds": round(migration.lost_seconds or 0, 2),
        "refund": migration.refund,
        "world_size": [job.plan.world_size],
        "rank_startup": startup,
        **{key: round(value, 2) for key, value in extra.items()},
    }
    print(f"\n{scenario}: {json.dumps(result)}")
    if path := os.environ.get("STARVERSE_BENCH_RECORD"):
        with open(path, "a") as out:
            out.write(json.dumps(result) + "\n")


def timeline(job_id: int) -> str:
    job = Job.objects.get(pk=job_id)
    lines = [f"job {job_id}: {job.status} step {job.step} epoch {job.epoch}: {job.status_reason}"]
    lines += [f"  {e.created_at:%H:%M:%S.%f} e{e.epoch} {e.kind}: {e.message}" for e in job.events.all()]
    lines += [f"  migration {m.pk}: {m.status} {m.reason} {m.from_epoch}->{m.to_epoch}" for m in job.migrations.all()]
    return "\n".join(lines)


def wait_warm(stack, hostname: str, ranks: int = 1):
    """An idle agent keeps a rank process started (torch imported): wait until it says so."""
    wait_until(
        lambda: (Node.objects.get(hostname=hostname).health or {}).get("warm_ranks", 0) >= ranks,
        90,
        f"{hostname} to warm up a rank",
        stack,
    )


def wait_online(stack, *hostnames):
    wait_until(
        lambda: Node.objects.filter(hostname__in=hostnames, agent_status=AgentStatus.ONLINE).count() == len(hostnames),
        60,
        f"{', '.join(hostnames)} to enroll",
        stack,
    )


def submit(api, **spec):
    body = {"model": "llama-tiny", "per_device_batch_size": 4, "policy": "cost-performance", "max_budget": "28", **spec}
    response = api.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_a_higher_bid_takes_the_chips_and_the_run_resumes_elsewhere_from_its_checkpoint(stack, alice, bob):
    stack.add_agent("spot-4090", "rtx-4090", chips=2, spot=True)
    wait_online(stack, "spot-4090")
    job_id = submit(token_client(alice), max_steps=3000, spot=True, bid="0.80", allow_on_demand=False)
    wait_until(lambda: Job.objects.filter(pk=job_id, step__gte=15).exists(), 180, "alice's run to train", stack)
    stack.add_agent("spot-910b", "ascend-910b", chips=1, spot=True)
    wait_online(stack, "spot-910b")
    wait_warm(stack, "spot-910b")

    rival_id = submit(
        token_client(bob), max_steps=10, spot=True, bid="1.00", allow_on_demand=False, chip_counts={"rtx-4090": 2}
    )

    migration = wait_until(
        lambda: JobMigration.objects.filter(job_id=job_id, status="resumed").first(),
        180,
        "the run to resume",
        stack,
        explain=lambda: timeline(job_id),
    )
    job = Job.objects.get(pk=job_id)
    assert migration.reason == "outbid" and migration.nodes == ["spot-4090"]
    assert Bid.objects.get(job_id=rival_id, chip_type__slug="rtx-4090").chips == 2
    # Resumed on the 910B, one rank instead of two, from the checkpoint taken on notice: nothing lost or repeated.
    new = job.allocations.get(epoch=migration.to_epoch)
    assert new.node.hostname == "spot-910b" and new.mode == AllocationMode.SPOT
    old_steps = JobMetric.objects.filter(job=job, epoch=migration.from_epoch).aggregate(last=Max("step"))["last"]
    new_steps = JobMetric.objects.filter(job=job, epoch=migration.to_epoch).aggregate(first=Min("step"))["first"]
    assert migration.checkpoint_step == old_steps, "the notice checkpoint is the last step run on the old chips"
    assert new_steps == migration.resume_step == migration.checkpoint_step + 1
    assert migration.steps_lost == 0 and migration.lost_seconds == 0
    # The loss goes on from where it was instead of starting over.
    last_old = JobMetric.objects.get(job=job, epoch=migration.from_epoch, rank=0, step=old_steps).loss
    first_new = JobMetric.objects.get(job=job, epoch=migration.to_epoch, rank=0, step=new_steps).loss
    assert first_new < job.first_loss * 0.9 and abs(first_new - last_old) < 0.5 * last_old, (last_old, first_new)
    # The old chips were billed up to the notice and not a second more; the insurance was paid.
    for old in job.allocations.filter(epoch=migration.from_epoch):
        assert old.ended_at == migration.notice_at and old.billed_through <= migration.notice_at
    assert migration.refund > 0
    assert Transaction.objects.filter(idempotency_key=f"insurance:{migration.pk}", kind="refund").exists()
    record("outbid", migration)

    wait_until(
        lambda: JobMetric.objects.filter(job=job, epoch=migration.to_epoch, step__gte=new_steps + 20).exists(),
        120,
        "the resumed run to go on",
        stack,
    )
    rival = wait_until(
        lambda: Job.objects.filter(pk=rival_id, status__in=JobStatus.finished()).first(), 120, "bob's run", stack
    )
    assert rival.status == JobStatus.SUCCEEDED, rival.status_reason
    assert {a.node.hostname for a in rival.allocations.all()} == {"spot-4090"}
    token_client(alice).post(f"/api/v1/jobs/{job_id}/cancel/")


def test_a_spot_run_on_an_uploaded_model_keeps_the_chips_its_bid_won_and_trains_to_the_end(stack, alice, tmp_path):
    """The market sizes a user's model as planning did: before, every clearing "outbid" it at a lower price."""
    stack.add_agent("u-4090", "rtx-4090", chips=1, spot=True)
    wait_online(stack, "u-4090")
    api = token_client(alice)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.add(make_model_dir(tmp_path / "my-llama", "llama"), arcname="my-llama")
    upload = SimpleUploadedFile("my-llama.tar.gz", archive.getvalue())
    uploaded = api.post("/api/v1/models/", {"name": "my-llama", "file": upload}, format="multipart")
    assert uploaded.status_code == 201, uploaded.content
    job_id = submit(api, model=uploaded.json()["reference"], max_steps=40, seq_len=32, spot=True, bid="1.00",
                    allow_on_demand=False)  # fmt: skip

    job = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=JobStatus.finished()).first(),
        300,
        "the run to end",
        stack,
        explain=lambda: timeline(job_id),
    )
    assert job.status == JobStatus.SUCCEEDED, timeline(job_id)
    assert not job.migrations.exists(), timeline(job_id)
    (allocation,) = job.allocations.all()
    assert allocation.mode == AllocationMode.SPOT and allocation.node.hostname == "u-4090"
    # Prices are kept when they change: the last one before the run ended is the market it trained in.
    market = SpotPrice.objects.filter(chip_type__slug="rtx-4090", at__lt=allocation.ended_at).latest("at")
    assert (market.demand, market.allocated) == (1, 1) and market.price_per_hour < 1_000_000


def test_killing_an_agent_mid_run_moves_the_run_and_refunds_the_lost_work(stack, alice):
    for hostname, chip in [("k-4090", "rtx-4090"), ("k-v5e", "tpu-v5e"), ("k-910b", "ascend-910b")]:
        stack.add_agent(hostname, chip)
    wait_online(stack, "k-4090", "k-v5e", "k-910b")
    job_id = submit(token_client(alice), max_steps=200, policy="fastest")
    wait_until(
        lambda: Job.objects.filter(pk=job_id, latest_checkpoint_step__isnull=False, step__gte=25).exists(),
        240,
        "a periodic checkpoint",
        stack,
    )
    assert Job.objects.get(pk=job_id).plan.world_size == 3

    stack.kill("agent-k-v5e")  # the host dies with its rank; the others lose their peer
    killed_at = time.time()

    migration = wait_until(
        lambda: JobMigration.objects.filter(job_id=job_id, status="resumed").first(), 180, "the run to resume", stack
    )
    detected = migration.notice_at.timestamp() - killed_at
    assert migration.reason == "lost_node" and migration.nodes == ["k-v5e"]
    assert detected <= 12, f"the dead node was noticed after {detected:.1f}s"
    assert migration.steps_lost is not None and migration.lost_seconds > 0 and migration.refund > 0
    job = Job.objects.get(pk=job_id)
    assert {rank.chip for rank in job.plan.ranks} == {"rtx-4090", "ascend-910b"}
    assert migration.resume_step == migration.checkpoint_step + 1
    record("lost node", migration, detected_s=detected)
    token_client(alice).post(f"/api/v1/jobs/{job_id}/cancel/")
