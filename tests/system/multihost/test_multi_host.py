"""Training across hosts that share nothing but the network.

Each node agent runs in a network namespace of its own (tests/support/netns.py): its own loopback,
its own `eth0` on a bridge, and a hostname that resolves to 127.0.0.1 there, as on many real hosts.
The platform (web server, Celery worker and beat, object storage) listens on the bridge address in
the root namespace. No agent declares an address: the platform records the one it sees each agent
at, and every rank listens on the interface holding its node's address. Checkpoints go to object
storage (SeaweedFS on the bridge), never to a disk the hosts share.

One platform for the module; each test runs its own job: one that spans three hosts, one moved to
a fourth host by a maintenance reclaim, one whose host's cable is cut mid-run, and one of three
islands (three stacks) on three hosts, kept in step over the bridge by the platform's Lighthouse.
"""

from __future__ import annotations

import io
import ipaddress
import secrets
import time

import boto3
import httpx
import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.management import call_command

from billing.models import Transaction
from billing.services.credits import adjust_credit
from fleet.choices import AgentStatus, JobStatus, MigrationReason
from fleet.models import Job, Node
from kernel.money import to_micros
from launcher.s3 import EmbeddedS3
from portal.celery import app as celery_app
from portal.models import ApiToken
from tests.support.netns import bridged_hosts
from tests.support.netns_platform import FleetPlatform, free_port, wait_until
from workers.models import AgentCommand, JobMetric, JobMigration
from workers.services import lifecycle

pytestmark = pytest.mark.slow

HOSTS = 3
HEARTBEAT_DEADLINE_S = 5  # a silent node is lost after this (plus one reconciler pass, 1 s here)


# -- the module's platform -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def committed_rows(django_db_setup, django_db_blocker):
    """The platform's processes read what the tests write, so rows are committed; flushed once, at the end."""
    with django_db_blocker.unblock():
        try:
            yield
        finally:
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(autouse=True)
def db(committed_rows, django_db_blocker):
    """pytest-django's `db`, overridden for this module: no wrapping transaction and no flush between
    tests, which share the module's platform and its rows (the ledger is still audited after each)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture(scope="module")
def netns_platform(committed_rows, tmp_path_factory):
    call_command("seed_catalog", stdout=io.StringIO())
    root = tmp_path_factory.mktemp("netns_platform")
    with bridged_hosts(HOSTS) as network:
        s3 = EmbeddedS3(root / "s3", free_port(network.address), ip=network.address)
        s3.start()
        env = {
            **s3.environment(),
            "STORAGE_URL": f"{s3.url}/fleet-{secrets.token_hex(4)}",
            "STARVERSE_DATA_DIR": str(root / "platform"),
            "RUNS_ROOT": str(root / "platform" / "runs"),
            "AGENT_HEARTBEAT_DEADLINE_S": str(HEARTBEAT_DEADLINE_S),
            "AGENT_POLL_WAIT_S": "1",
            "RECONCILE_SECONDS": "1",
        }
        platform = FleetPlatform(network, root, env)
        platform.s3, platform.storage_url = s3, env["STORAGE_URL"]
        previous_queue = celery_app.conf.task_default_queue
        celery_app.conf.task_default_queue = platform.queue  # what this process publishes goes to that worker
        try:
            platform.start_platform()
            for host in network.hosts:
                platform.add_agent(host, f"host-{host.index}")
            wait_online(platform, [f"host-{host.index}" for host in network.hosts])
            yield platform
        finally:
            celery_app.conf.task_default_queue = previous_queue
            platform.stop()
            s3.stop()


@pytest.fixture(scope="module")
def user_api(netns_platform, committed_rows):
    user = get_user_model().objects.create_user(username="fleet-user", email="fleet@example.com", password="x-x-x-x")
    EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=True)  # tokens need it (#28)
    adjust_credit(user, to_micros("500"), reason="test funds", actor=None, key="fleet-funds")
    _, raw = ApiToken.issue(user)
    with httpx.Client(base_url=netns_platform.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30) as client:
        yield client


# -- helpers -------------------------------------------------------------------------------------
def wait_online(platform: FleetPlatform, hostnames: list[str], timeout: float = 60) -> None:
    wait_until(
        lambda: Node.objects.filter(hostname__in=hostnames, agent_status=AgentStatus.ONLINE).count() == len(hostnames),
        timeout,
        f"{', '.join(hostnames)} to be online",
        platform.logs,
    )


def with_hosts(platform: FleetPlatform, count: int) -> None:
    """Hosts join the network (each with its agent) until there are `count`; all of them online."""
    while len(platform.network.hosts) < count:
        host = platform.network.add_host()
        platform.add_agent(host, f"host-{host.index}")
    wait_online(platform, [f"host-{host.index}" for host in platform.network.hosts])


def submit(user_api: httpx.Client, max_steps: int, **fields) -> int:
    spec = {
        "model": "llama-tiny",
        "dataset": "synthetic",
        "per_device_batch_size": 4,
        "max_steps": max_steps,
        "policy": "fastest",
        "max_budget": "28",
        "chip_counts": {"rtx-4090": 3},
        **fields,
    }
    response = user_api.post("/api/v1/jobs/", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def timeline(job_id: int) -> str:
    job = Job.objects.get(pk=job_id)
    lines = [f"job {job_id}: {job.status} step {job.step} epoch {job.epoch}: {job.status_reason}"]
    lines += [f"  {e.created_at:%H:%M:%S.%f} e{e.epoch} {e.kind}: {e.message}" for e in job.events.all()]
    lines += [f"  migration {m.pk}: {m.status} {m.reason} {m.from_epoch}->{m.to_epoch}" for m in job.migrations.all()]
    return "\n".join(lines)


def explain(platform: FleetPlatform, job_id: int):
    return lambda: f"{timeline(job_id)}\n{platform.logs()}"


def wait_finished(platform: FleetPlatform, job_id: int, timeout: float = 150) -> Job:
    job = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=JobStatus.finished()).first(),
        timeout,
        f"job {job_id} to finish",
        explain(platform, job_id),
    )
    assert job.status == JobStatus.SUCCEEDED, explain(platform, job_id)()
    return job


def wait_for_checkpoint(platform: FleetPlatform, job_id: int, step: int) -> Job:
    """Until the job has a periodic checkpoint and has trained past `step`."""
    return wait_until(
        lambda: Job.objects.filter(pk=job_id, latest_checkpoint_step__isnull=False, step__gte=step).first(),
        150,
        f"job {job_id} to checkpoint and reach step {step}",
        explain(platform, job_id),
    )


def wait_resumed(platform: FleetPlatform, job_id: int) -> JobMigration:
    """Until the job's move is over: its new placement ran its first step."""
    return wait_until(
        lambda: JobMigration.objects.filter(job_id=job_id, status="resumed").first(),
        150,
        f"job {job_id} to resume",
        explain(platform, job_id),
    )


def hosts_of(job: Job) -> list[str]:
    return [rank.hostname for rank in job.plan.ranks]


def stored_keys(platform: FleetPlatform, prefix: str) -> list[str]:
    """Object keys under STORAGE_URL's prefix + `prefix`, read from the S3 server itself."""
    bucket, _, base = platform.storage_url.removeprefix("s3://").partition("/")
    env = platform.s3.environment()
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{base}/{prefix}")
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def assert_checkpoints_in_object_storage(platform: FleetPlatform, job: Job, *steps: int) -> None:
    """The job's checkpoints (these steps among them) are objects in S3, none on a disk the hosts share."""
    assert job.latest_checkpoint.startswith("store:"), job.latest_checkpoint
    keys = stored_keys(platform, f"checkpoints/job-{job.pk}/")
    for step in steps:
        assert any(f"checkpoints/job-{job.pk}/step-{step}/" in key for key in keys), (step, keys[:20])
    assert not (platform.root / "platform" / "checkpoints" / f"job-{job.pk}").exists()


def ranks_of(platform: FleetPlatform, job_id: int, epoch: int) -> dict[str, dict]:
    """The launches the platform sent to each node for one placement."""
    commands = AgentCommand.objects.filter(job_id=job_id, epoch=epoch, type="start").select_related("node")
    return {command.node.hostname: rank for command in commands for rank in command.payload["ranks"]}


# -- the tests -----------------------------------------------------------------------------------
def test_each_host_is_recorded_at_the_address_the_platform_sees_it_at(netns_platform):
    for host in netns_platform.network.hosts:
        node = Node.objects.get(hostname=f"host-{host.index}")
        assert (node.address, node.address_observed) == (host.address, True)


def test_one_job_trains_across_three_hosts_that_share_only_the_network(netns_platform, user_api):
    job_id = submit(user_api, max_steps=30)
    job = wait_finished(netns_platform, job_id)

    assert sorted(hosts_of(job)) == ["host-1", "host-2", "host-3"]
    launches = ranks_of(netns_platform, job_id, job.epoch)
    master = Node.objects.get(hostname=hosts_of(job)[0]).address
    assert {launch["master_addr"] for launch in launches.values()} == {master}
    assert (
        ipaddress.ip_address(master) in netns_platform.network.subnet and master != netns_platform.network.address
    )  # a host's
    assert set(JobMetric.objects.filter(job=job).values_list("rank", flat=True)) == {0, 1, 2}
    assert job.step == 30 and job.loss < job.first_loss * 0.9, (job.first_loss, job.loss)
    assert_checkpoints_in_object_storage(netns_platform, job, 30)


def test_a_maintenance_reclaim_moves_the_job_to_a_host_that_joined_later(netns_platform, user_api):
    with_hosts(netns_platform, HOSTS + 1)
    job_id = submit(user_api, max_steps=50)
    job = wait_for_checkpoint(netns_platform, job_id, step=12)
    before = hosts_of(job)
    leaving = Node.objects.get(hostname=before[-1])

    Node.objects.filter(pk=leaving.pk).update(agent_status=AgentStatus.DRAINING)
    assert lifecycle.reclaim(
        job_id, MigrationReason.MAINTENANCE, "fleet test maintenance", nodes=[leaving], notice_seconds=30
    )
    migration = wait_resumed(netns_platform, job_id)
    assert_checkpoints_in_object_storage(netns_platform, Job.objects.get(pk=job_id), migration.checkpoint_step)
    job = wait_finished(netns_platform, job_id)

    assert migration.nodes == [leaving.hostname]
    assert migration.resume_step == migration.checkpoint_step + 1  # the notice's checkpoint: nothing lost
    assert leaving.hostname not in hosts_of(job) and len(hosts_of(job)) == 3
    first_new = JobMetric.objects.filter(job=job, epoch=migration.to_epoch).order_by("step").first()
    assert first_new.step == migration.resume_step
    Node.objects.filter(pk=leaving.pk).update(agent_status=AgentStatus.ONLINE)  # back from maintenance


def test_a_host_whose_cable_is_cut_is_lost_within_ten_seconds_and_the_job_resumes_on_the_others(
    netns_platform, user_api
):
    with_hosts(netns_platform, HOSTS + 1)  # three for the job, one to take the lost host's place
    job_id = submit(user_api, max_steps=50)
    job = wait_for_checkpoint(netns_platform, job_id, step=12)
    lost_name = hosts_of(job)[0]  # rank 0's host: the rendezvous goes with it
    lost = next(host for host in netns_platform.network.hosts if f"host-{host.index}" == lost_name)

    lost.cut()
    cut_at = time.time()
    migration = wait_until(
        lambda: JobMigration.objects.filter(job_id=job_id, reason=MigrationReason.LOST_NODE).first(),
        20,
        f"{lost_name} to be declared lost",
        explain(netns_platform, job_id),
    )
    detected_s = migration.notice_at.timestamp() - cut_at
    assert detected_s <= 10, f"{lost_name} was declared lost {detected_s:.1f}s after its cable was cut"
    assert Node.objects.get(hostname=lost_name).agent_status == AgentStatus.LOST
    migration = wait_resumed(netns_platform, job_id)
    # Resumed from its last periodic checkpoint, which is in object storage (rank 0's host is gone).
    assert_checkpoints_in_object_storage(netns_platform, Job.objects.get(pk=job_id), migration.checkpoint_step)
    job = wait_finished(netns_platform, job_id)

    migration.refresh_from_db()
    assert migration.nodes == [lost_name]
    assert lost_name not in hosts_of(job) and len(hosts_of(job)) == 3
    assert migration.resume_step == migration.checkpoint_step + 1
    # The work since the checkpoint is lost; the insurance refunds it.
    assert migration.steps_lost is not None and migration.lost_seconds > 0 and migration.refund > 0
    assert Transaction.objects.filter(idempotency_key=f"insurance:{migration.pk}", kind="refund").exists()

    # The cable back in: the agent gets its fenced ranks' kill first, then is back in service.
    lost.restore()
    wait_online(netns_platform, [lost_name], timeout=60)


def test_three_islands_on_three_hosts_train_as_one_run_over_the_bridge(netns_platform, user_api):
    hosts = netns_platform.network.hosts
    netns_platform.add_agent(hosts[1], "island-tpu", chip="tpu-v5e")
    netns_platform.add_agent(hosts[2], "island-910b", chip="ascend-910b")
    wait_online(netns_platform, ["island-tpu", "island-910b"])
    chips = {"rtx-4090": 1, "tpu-v5e": 1, "ascend-910b": 1}
    job_id = submit(user_api, max_steps=30, chip_counts=chips, sync_mode="step")
    job = wait_finished(netns_platform, job_id)

    islands = job.plan.islands()
    assert len(islands) == 3 and job.plan.bridge.mode == "step"
    launches = ranks_of(netns_platform, job_id, job.epoch)
    by_island = {launch["island"]["index"]: (hostname, launch) for hostname, launch in launches.items()}
    for hostname, launch in by_island.values():
        node = Node.objects.get(hostname=hostname)
        # Each island is a world of its own on its host; its leader listens at the host's own address.
        assert launch["world_size"] == 1 and launch["master_addr"] == node.address
        assert launch["island"]["address"] == node.address
        assert ipaddress.ip_address(node.address) in netns_platform.network.subnet
        assert launch["island"]["lighthouse"].startswith(":")  # on the platform's host, at the bridge address
    # The TPU and Ascend islands are on two hosts of their own (the RTX 4090 one on whichever host the plan took).
    tpu, npu = Node.objects.get(hostname="island-tpu"), Node.objects.get(hostname="island-910b")
    assert (tpu.address, npu.address) == (hosts[1].address, hosts[2].address)
    assert set(JobMetric.objects.filter(job=job).values_list("rank", flat=True)) == {0, 1, 2}
    assert job.step == 30 and job.loss < job.first_loss * 0.9, (job.first_loss, job.loss)
    # Every island's leader sent its gradient across the bridge at every step.
    assert all(figures["syncs"] == 30 and figures["bytes_across"] > 0 for figures in job.island_stats.values())
