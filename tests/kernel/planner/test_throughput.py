"""Throughput: measured history first, else the FLOPs model; collectives over the slowest link."""

from __future__ import annotations

import pytest

from kernel.modelspecs import resolve_model
from kernel.planner import ThroughputModel, comm_seconds, plan
from kernel.planner.throughput import CROSS_POOL_GBPS, INTRA_POOL_GBPS
from tests.support.planner.fleets import CHIPS, chips, nodes, request


def test_it_estimates_tokens_per_second_from_mfu_and_peak_flops():
    model, chip = resolve_model("llama-2-7b"), CHIPS["a100-80g"]
    expected = 0.45 * 312e12 / model.training_flops_per_token
    assert ThroughputModel().tokens_per_s(model, chip) == pytest.approx(expected)
    assert ThroughputModel().source(model, chip) == "flops-model"


def test_measured_history_wins_and_is_labelled():
    model, chip = resolve_model("llama-2-7b"), CHIPS["a100-80g"]
    measured = ThroughputModel(measured={("llama-2-7b", "a100-80g"): 1234.0})
    assert measured.tokens_per_s(model, chip) == 1234.0
    assert measured.source(model, chip) == "measured"


def test_simulated_nodes_are_paced_by_the_fleet_wide_scale():
    model = ThroughputModel(simulation_scale=0.01)
    fast = plan(request("llama-tiny", policy="fastest"), chips(), nodes("h100-80g", 1, free=1))
    slow = plan(
        request("llama-tiny", policy="fastest"),
        chips(),
        nodes("h100-80g", 1, free=1, simulated=True),
        throughput=model,
    )
    assert slow.ranks[0].simulated
    assert slow.ranks[0].tokens_per_s == pytest.approx(fast.ranks[0].tokens_per_s * 0.01)


@pytest.mark.parametrize(("stage", "passes"), [(0, 2), (2, 2), (3, 3)])
def test_collectives_move_gradients_and_zero3_also_weights(stage, passes):
    params, ranks = 7_000_000_000, 8
    expected = passes * (ranks - 1) / ranks * 2 * params * 8 / (CROSS_POOL_GBPS * 1e9)
    assert comm_seconds(params, stage, ranks, cross_pool=True) == pytest.approx(expected)
    assert comm_seconds(params, stage, ranks, cross_pool=False) == pytest.approx(expected / 4)
    assert INTRA_POOL_GBPS == 400
    assert comm_seconds(params, stage, 1, cross_pool=True) == 0


def test_a_job_spanning_pools_gets_the_slow_link():
    within = plan(request(chip_counts={"a100-80g": 8}), chips(), nodes("a100-80g", 1) + nodes("a100-80g", 1, zone="z2"))
    across = plan(
        request(chip_counts={"a100-80g": 12}), chips(), nodes("a100-80g", 1) + nodes("a100-80g", 1, zone="z2")
    )
    assert (within.link_gbps, across.link_gbps) == (400, 100)


def test_step_time_is_the_slowest_rank_plus_collectives():
    quote = plan(
        request(chip_counts={"a100-80g": 2, "rtx-4090": 6}),
        chips(),
        nodes("a100-80g", 1) + nodes("rtx-4090", 1),
    )
    seq = resolve_model("llama-2-7b").seq_len
    slowest = max(r.micro_batch * seq / r.tokens_per_s for r in quote.ranks)
    assert quote.step_seconds == pytest.approx(slowest + quote.comm_seconds)
    assert quote.tokens_per_s == pytest.approx(quote.tokens_per_step / quote.step_seconds)
