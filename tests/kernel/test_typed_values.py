"""Plans and job specs cross boundaries as typed values, and survive their JSON round trip exactly."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.models import Job
from kernel.planner import Plan, PlanningError, ThroughputModel, plan
from kernel.spec import JobSpec
from tests.support.planner.fleets import fleets, priced_chips, requests
from workers.api.job_spec import format_plan


@st.composite
def plans(draw) -> Plan:
    chip_list = draw(priced_chips(max_types=4))
    offers = draw(fleets(chip_list, max_nodes=4, max_free=4))
    request = draw(requests(models=("llama-tiny",), max_budget=200_000_000))
    try:
        made = plan(request, chip_list, offers, ThroughputModel())
    except PlanningError:
        return None
    return made


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(plans().filter(lambda made: made is not None))
def test_a_plan_reads_back_from_its_json_as_it_was(made):
    stored = json.loads(json.dumps(made.to_dict()))

    assert Plan.from_dict(stored).to_dict() == made.to_dict()


def test_a_job_spec_reads_back_from_its_json_as_it_was():
    spec = JobSpec(
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=28_000_000,
        chip_counts={"rtx-4090": 2},
        spot=True,
        spot_bid_per_hour=900_000,
        allow_on_demand=False,
        global_batch=8,
        chip_types=("rtx-4090",),
    )

    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.spot_only


@pytest.mark.django_db
def test_a_jobs_plan_is_a_plan_in_memory_and_json_in_the_database(alice):
    rank = {"chip": "rtx-4090", "node_id": 7, "micro_batch": 4, "mode": "spot", "simulated": True}
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1,
        plan={"ranks": [rank], "global_batch": 4, "zero_stage": 1},
    )  # fmt: skip

    assert isinstance(job.plan, Plan) and job.plan.ranks[0].node_pk == 7
    assert Job.objects.get(pk=job.pk).plan.spot_chip_counts() == {"rtx-4090": 1}
    job.plan = replace(job.plan, zero_stage=2)
    job.save(update_fields=["plan"])
    stored = Job.objects.filter(pk=job.pk).values_list("plan", flat=True).get()
    assert stored["zero_stage"] == 2 and stored["ranks"][0]["node_id"] == "7"


@pytest.mark.django_db
def test_a_resuming_job_is_planned_again_with_its_global_batch_and_pinned_chip_types(alice):
    job = Job(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1,
        allow_other_chips=False, latest_checkpoint="/ckpt/3",
        plan={"ranks": [{"chip": "tpu-v5e", "node_id": 1, "micro_batch": 6}], "global_batch": 6},
    )  # fmt: skip

    spec = JobSpec.of_job(job)

    assert (spec.global_batch, spec.chip_types) == (6, ("tpu-v5e",))


def test_the_api_shows_a_ranks_node_as_its_integer_id_and_money_as_decimals():
    plan = Plan.from_dict(
        {"ranks": [{"chip": "tpu-v5e", "node_id": "12", "micro_batch": 4}], "price_per_hour": 2_800_000}
    )

    shown = format_plan(plan)

    assert shown["ranks"][0]["node_id"] == 12 and shown["price_per_hour"] == "2.80"
