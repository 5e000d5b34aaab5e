"""The bridge an island's leader measured: kept on the job's island figures and on the leader's node, and
read back by the planner in place of the pool's declared figure (the agents' reports played by hand)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job, Pool
from kernel.spec import JobSpec
from workers.api.agent_serializers import ReportItemSerializer
from workers.models import BridgeMeasurement
from workers.services.island_reports import RECENT_BRIDGE_REPORTS, remember_bridge
from workers.services.lifecycle import submit as submit_job
from workers.services.planning import fleet_quote
from workers.services.reports import accept_report

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]

CHIPS = {"rtx-4090": 2, "tpu-v5e": 1, "ascend-910b": 1}
SPEC = {
    "model_name": "llama-tiny",
    "per_device_batch_size": 2,
    "max_steps": 20,
    "max_budget_per_hour": 28_000_000,
    "chip_counts": CHIPS,
}


@pytest.fixture
def islands(enroll, fund, alice):
    """A placed job of three islands on three simulated stacks, and its nodes by chip."""
    fund(alice, "100")
    nodes = {chip: enroll(f"{chip}-host", chip, chips=count)[0] for chip, count in CHIPS.items()}
    job = submit_job(alice, JobSpec.from_dict(SPEC))
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING and job.plan.bridge is not None
    return job, nodes


def island_item(rank: int, island: int, step: int, **figures) -> dict:
    item = {"kind": "island", "rank": rank, "step": step, "island": island, "change": "sync", "syncs": step}
    return {**item, "members": [0, 1, 2], "stack": "cuda", "mode": "step", "t": timezone.now().timestamp(), **figures}


def leader_of(job: Job, chip: str) -> tuple[int, int]:
    """(island index, its leader's rank) of the island of `chip`."""
    island = next(island for island in job.plan.islands() if chip in island["chips"])
    return island["index"], island["ranks"][0]


def test_a_leaders_measured_bridge_is_kept_on_the_job_and_on_its_node(islands):
    job, nodes = islands
    tpu = nodes["tpu-v5e"]
    index, rank = leader_of(job, "tpu-v5e")
    serializer = ReportItemSerializer(data=island_item(rank, index, 10, bridge_gbps=2.0))
    assert serializer.is_valid(), serializer.errors  # the agent API takes the figure
    for step, gbps in ((10, 2.0), (20, 8.0), (30, 3.0)):
        accept_report(tpu, job.pk, job.epoch, [island_item(rank, index, step, bridge_gbps=gbps)])
    accept_report(tpu, job.pk, job.epoch, [island_item(rank, index, 40)])  # nothing sent since: no figure
    job.refresh_from_db()
    assert job.island_stats[str(index)]["bridge_gbps"] == 3.0  # the newest figure stays
    measured = BridgeMeasurement.objects.get(node=tpu)
    assert (measured.gbps, measured.recent, measured.samples) == (3.0, [2.0, 8.0, 3.0], 3)  # the median
    assert not BridgeMeasurement.objects.exclude(node=tpu).exists()  # only the reporting node measured


def test_a_nodes_figure_is_the_median_of_its_recent_reports_only(islands):
    _, nodes = islands
    node = nodes["rtx-4090"]
    for gbps in range(1, RECENT_BRIDGE_REPORTS + 4):
        measure = remember_bridge(node, float(gbps))
    assert measure.recent == [float(g) for g in range(4, RECENT_BRIDGE_REPORTS + 4)]
    assert measure.samples == RECENT_BRIDGE_REPORTS + 3
    assert measure.gbps == (4 + RECENT_BRIDGE_REPORTS + 3) / 2


def test_the_planner_prices_the_bridge_at_the_measured_figure_over_the_declared_one(islands):
    job, nodes = islands
    Pool.objects.update(bridge_gbps=1.0)  # every pool declares a 1 Gbit/s link
    declared = fleet_quote(JobSpec.from_dict(SPEC)).bridge
    assert (declared.gbps, declared.source) == (1.0, "declared")
    for chip, node in nodes.items():  # every island's leader measured 40 Gbit/s
        index, rank = leader_of(job, chip)
        accept_report(node, job.pk, job.epoch, [island_item(rank, index, 10, bridge_gbps=40.0)])
    measured = fleet_quote(JobSpec.from_dict(SPEC)).bridge
    assert (measured.gbps, measured.source) == (40.0, "measured")
    assert measured.seconds_per_sync < declared.seconds_per_sync
    assert measured.sync_every < declared.sync_every or measured.mode != declared.mode
