"""One job, one backend: simulated chips (CPU, gloo) and real ones (CUDA, NCCL) never share a plan."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kernel.planner import (
    POLICIES,
    ModelDoesNotFit,
    NoCapacity,
    PlanningError,
    ThroughputModel,
    exhaustive_plan,
    objective_value,
    plan,
)
from kernel.planner.evaluate import Evaluator
from kernel.planner.fleet import build_kinds
from tests.support.planner.fleets import chips, fleets, nodes, priced_chips, request, requests, yuan

# The same chip type, real and simulated, in one pool: before, with no fleet-wide pacing, these
# were one kind and a plan took chips of both.
REAL_4090 = nodes("rtx-4090", 2, free=2)
SIMULATED_4090 = nodes("rtx-4090", 2, free=2, start=10, simulated=True)
BOTH_4090 = REAL_4090 + SIMULATED_4090


@st.composite
def instances(draw):
    chip_list = draw(priced_chips(max_types=3))
    return draw(requests()), chip_list, draw(fleets(chip_list, max_nodes=3, max_free=3))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 20000])
def test_real_and_simulated_rtx_4090s_are_never_planned_together(policy, scale):
    for budget in (None, yuan(2.5), yuan(5)):
        quote = plan(
            request("llama-tiny", policy=policy, max_budget_per_hour=budget),
            chips(),
            BOTH_4090,
            ThroughputModel(simulation_scale=scale),
        )
        assert len({rank.simulated for rank in quote.ranks}) == 1, quote.ranks
        assert len({rank.simulated for rank in quote.baseline.ranks}) == 1, quote.baseline.ranks


def test_the_plan_is_the_better_of_the_real_plan_and_the_simulated_plan():
    throughput = ThroughputModel(simulation_scale=0.5)
    for policy in ("cost-performance", "fastest", "cheapest"):
        req = request("llama-tiny", policy=policy, per_device_batch_size=2)
        both = plan(req, chips(), BOTH_4090, throughput)
        alone = [plan(req, chips(), offers, throughput) for offers in (REAL_4090, SIMULATED_4090)]
        assert objective_value(both, policy) == min(objective_value(quote, policy) for quote in alone)
    fastest = plan(request("llama-tiny", policy="fastest"), chips(), BOTH_4090, throughput)
    assert not any(rank.simulated for rank in fastest.ranks)  # the real side runs twice as fast here


def test_a_model_that_fits_only_on_real_and_simulated_chips_together_is_refused_saying_why():
    # llama-2-7b needs eight 24 GiB chips at ZeRO-3; there are four of each kind.
    with pytest.raises(ModelDoesNotFit) as refused:
        plan(request("llama-2-7b", per_device_batch_size=1), chips(), BOTH_4090)
    message = str(refused.value)
    assert "llama-2-7b fits only on real and simulated chips together" in message
    assert "4 real rtx-4090, 4 simulated rtx-4090" in message
    assert "simulated ranks run on the CPU with gloo, real ones on CUDA with NCCL" in message
    # Eight chips of one kind do hold it.
    eight = nodes("rtx-4090", 4, free=2) + nodes("rtx-4090", 1, free=2, start=10, simulated=True)
    placed = plan(request("llama-2-7b", per_device_batch_size=1), chips(), eight)
    assert placed.world_size == 8 and not any(rank.simulated for rank in placed.ranks)


def test_a_model_too_big_for_either_side_and_for_both_says_how_much_it_needs():
    with pytest.raises(ModelDoesNotFit, match=r"spread over 4 at ZeRO-3 .* every chip needs [\d.]+ GiB"):
        plan(request("llama-2-70b", per_device_batch_size=1), chips(), BOTH_4090)


def test_hand_picked_chips_come_from_one_backend():
    real_first = plan(request("llama-tiny", chip_counts={"rtx-4090": 4}), chips(), BOTH_4090)
    assert real_first.world_size == 4 and len({rank.simulated for rank in real_first.ranks}) == 1
    only_simulated_tpu = REAL_4090 + nodes("rtx-4090", 1, free=1, start=10, simulated=True)
    only_simulated_tpu += nodes("tpu-v5e", 1, free=1, simulated=True)
    quote = plan(request("llama-tiny", chip_counts={"rtx-4090": 1, "tpu-v5e": 1}), chips(), only_simulated_tpu)
    assert [rank.simulated for rank in quote.ranks] == [True, True]


def test_hand_picked_chips_free_only_across_both_backends_are_refused_saying_why():
    with pytest.raises(NoCapacity) as refused:
        plan(request("llama-tiny", chip_counts={"rtx-4090": 6}), chips(), BOTH_4090)
    assert "6 × rtx-4090 are free only on real and simulated nodes together" in str(refused.value)
    assert "gloo" in str(refused.value) and "NCCL" in str(refused.value)
    mixed_types = REAL_4090 + nodes("tpu-v5e", 1, free=1, simulated=True)
    with pytest.raises(NoCapacity, match=r"1 × rtx-4090 \+ 1 × tpu-v5e are free only on real and simulated"):
        plan(request("llama-tiny", chip_counts={"rtx-4090": 1, "tpu-v5e": 1}), chips(), mixed_types)


def test_the_evaluator_refuses_a_mixed_count_vector_outright():
    req = request("llama-tiny")
    kinds = build_kinds(req, chips(), BOTH_4090, ThroughputModel())
    assert [kind.simulated for kind in kinds] == [False, True]
    ev = Evaluator(req, kinds, None)
    assert ev.evaluate((1, 0)) is not None and ev.evaluate((0, 1)) is not None
    assert ev.evaluate((1, 1)) is None


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_no_plan_or_baseline_of_a_random_fleet_mixes_backends(instance):
    req, chip_list, offers = instance
    for planner in (plan, exhaustive_plan):
        try:
            quote = planner(req, chip_list, offers, ThroughputModel(simulation_scale=0.5))
        except PlanningError:
            continue
        assert len({rank.simulated for rank in quote.ranks}) == 1
        if len({offer.simulated for offer in offers if offer.free_chips}) == 2:
            event("planned with both backends free")
        if quote.baseline is not None:
            assert len({rank.simulated for rank in quote.baseline.ranks}) == 1
