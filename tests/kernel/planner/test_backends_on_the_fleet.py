"""On a platform without islands (no torchft Lighthouse): a quote, a placement and the API never mix real and
simulated chips. With islands they train together as two islands (tests/workers/services/test_island_launches.py)."""

from __future__ import annotations

import pytest

from fleet.choices import JobStatus
from fleet.models import Job, Node, Pool
from kernel.spec import JobSpec
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from workers.models import EnrollmentToken
from workers.services import planning
from workers.services.enrollment import enroll_node
from workers.services.placement import rank_launches

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_islands(settings):
    settings.LIGHTHOUSE_PROGRAM = ""


def rtx_4090_node(hostname: str, *, simulated: bool, chips: int) -> Node:
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=chips)
    return enroll_node(
        enrollment_token=raw,
        hostname=hostname,
        chip_type="rtx-4090",
        chips=chips,
        simulated=simulated,
        address="127.0.0.1",
    ).node


def test_quotes_on_real_and_simulated_rtx_4090s_take_one_kind_and_launch_on_one_device_kind(catalog, alice, settings):
    settings.SIMULATION_SLOWDOWN = 1  # simulated chips as fast as real ones: a mix would be the fastest plan
    real = rtx_4090_node("gpu-host", simulated=False, chips=2)
    simulated = rtx_4090_node("laptop", simulated=True, chips=2)
    spec = JobSpec(
        model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000, policy="fastest"
    )

    for quote in (planning.quote(spec), planning.fleet_quote(spec)):
        assert len({rank.simulated for rank in quote.ranks}) == 1, quote.ranks

    quote = planning.quote(spec)
    job = Job.objects.create(owner=alice, **spec.job_columns(), status=JobStatus.PLANNING)
    launches = rank_launches(job, quote, {real.pk: real, simulated.pk: simulated})
    assert len({launch.device.split(":")[0] for _, launch in launches}) == 1


def test_a_job_that_fits_only_across_real_and_simulated_chips_is_refused_with_the_reason(catalog, alice):
    rtx_4090_node("gpu-host", simulated=False, chips=4)
    rtx_4090_node("laptop", simulated=True, chips=4)
    api = token_client(alice)

    answer = api.post(
        "/api/v1/quotes/",
        {**JOB_SPEC, "model": "llama-2-7b", "per_device_batch_size": 1, "max_budget": "100"},
        format="json",
    )

    assert answer.status_code == 400, answer.json()
    [message] = answer.json()["errors"]["model"]
    assert answer.json()["code"] == "model_does_not_fit"
    assert (
        "llama-2-7b fits only on real and simulated chips together (4 real rtx-4090, 4 simulated rtx-4090)" in message
    )
    assert "simulated ranks run on the CPU with gloo, real ones on CUDA with NCCL" in message
