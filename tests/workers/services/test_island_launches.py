"""A plan of islands reaches the agents as one DeepSpeed world per island, kept in step by the job's Lighthouse."""

from __future__ import annotations

import pytest

from fleet.choices import JobStatus
from fleet.models import Job, Node, Pool
from kernel.protocol import job_rank
from kernel.spec import JobSpec
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from workers.models import EnrollmentToken
from workers.services import planning
from workers.services.enrollment import enroll_node
from workers.services.lighthouses import Keeper, islands_enabled, lighthouse_port, wanted
from workers.services.placement import rank_launches

pytestmark = pytest.mark.django_db


def node(chip: str, hostname: str, *, simulated: bool = True, chips: int = 2, address: str = "10.0.0.1") -> Node:
    pool = Pool.objects.get(chip_type__slug=chip)
    _, raw = EnrollmentToken.issue(pool, chips=chips)
    return enroll_node(
        enrollment_token=raw,
        hostname=hostname,
        chip_type=chip,
        chips=chips,
        simulated=simulated,
        address=address,
        runtimes=["cuda"],
    ).node


@pytest.fixture
def demo_stacks(catalog):
    """Simulated RTX 4090s, TPU v5e and Ascend 910B: three stacks, three islands."""
    return {
        "rtx-4090": node("rtx-4090", "gpu-sim", address="10.0.0.1"),
        "tpu-v5e": node("tpu-v5e", "tpu-sim", address="10.0.0.2"),
        "ascend-910b": node("ascend-910b", "npu-sim", address="10.0.0.3"),
    }


def spec(**fields) -> JobSpec:
    values = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 2,
        "max_steps": 20,
        "max_budget_per_hour": 28_000_000,
        "chip_counts": {"rtx-4090": 2, "tpu-v5e": 1, "ascend-910b": 1},
        **fields,
    }
    return JobSpec(**values)


def test_islands_are_on_where_the_lighthouse_program_is():
    assert islands_enabled()  # torchft is part of the agent extra `make test` installs


def test_a_plan_across_three_stacks_launches_three_worlds_that_meet_at_the_lighthouse(demo_stacks, alice):
    quote = planning.quote(spec())
    job = Job.objects.create(owner=alice, **spec().job_columns(), status=JobStatus.PLANNING, plan=quote)
    launches = [launch for _, launch in rank_launches(job, quote, {n.pk: n for n in demo_stacks.values()})]

    islands = {launch.island["index"]: launch.island for launch in launches}
    assert len(islands) == 3 and quote.bridge is not None
    assert {island["stack"] for island in islands.values()} == {"cuda-simulated", "xla-simulated", "cann-simulated"}
    assert sorted(job_rank(launch) for launch in launches) == list(range(quote.world_size))
    for index, island in islands.items():
        members = [launch for launch in launches if launch.island["index"] == index]
        assert sorted(launch.rank for launch in members) == list(range(len(members)))  # its own world
        assert {launch.world_size for launch in members} == {len(members)}
        assert {launch.master_port for launch in members} == {members[0].master_port}
        assert island["lighthouse"] == f":{lighthouse_port(job.pk)}"  # on the platform's host
        assert island["address"] == members[0].master_addr  # its leader's node
        assert island["mode"] == quote.bridge.mode and island["sync_every"] == quote.bridge.sync_every
        assert island["batches"] == {str(i): other["batch"] for i, other in enumerate(quote.islands())}
    assert len({launch.master_port for launch in launches}) == 3  # three rendezvous, one per island


def test_the_job_can_pin_the_sync_mode_and_h(demo_stacks, alice):
    quote = planning.quote(spec(sync_mode="diloco", sync_every=6))
    assert quote.bridge.mode == "diloco" and quote.bridge.sync_every == 6


def test_the_api_quote_lists_islands_and_the_sync_and_refuses_h_without_diloco(demo_stacks, alice):
    api = token_client(alice)
    body = {**JOB_SPEC, "max_steps": 20, "chip_counts": {"rtx-4090": 2, "tpu-v5e": 1, "ascend-910b": 1}}
    quote = api.post("/api/v1/quotes/", {**body, "sync_mode": "diloco", "sync_every": 4}, format="json")
    assert quote.status_code == 200, quote.json()
    plan = quote.json()
    assert len(plan["islands"]) == 3 and plan["sync"]["mode"] == "diloco" and plan["sync"]["sync_every"] == 4
    assert plan["sync"]["exact"] is False
    refused = api.post("/api/v1/quotes/", {**body, "sync_every": 4}, format="json")
    assert refused.status_code == 400
    assert "sync_every" in refused.json()["errors"]


def test_the_keeper_runs_one_lighthouse_per_running_job_of_islands_and_stops_it_after(
    demo_stacks, alice, tmp_path, settings
):
    quote = planning.quote(spec())
    job = Job.objects.create(owner=alice, **spec().job_columns(), status=JobStatus.RUNNING, plan=quote)
    assert wanted() == {job.pk: lighthouse_port(job.pk)}
    keeper = Keeper(settings.LIGHTHOUSE_PROGRAM, tmp_path)
    try:
        keeper.sync(wanted())
        proc = keeper.running[job.pk]
        assert proc.poll() is None
        Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
        keeper.sync(wanted())
        assert job.pk not in keeper.running and proc.poll() is not None
    finally:
        keeper.close()
