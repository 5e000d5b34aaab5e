"""Plans: budgets kept, ranks placed on real free chips, money exact, the baseline, determinism."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kernel.modelspecs import resolve_model
from kernel.planner import (
    PlanningError,
    ThroughputModel,
    lowest_fitting_stage,
    micro_batch_cap,
    plan,
    split_micro_batches,
)
from tests.support.planner.fleets import CHIPS, chips, fleets, nodes, priced_chips, request, requests, yuan

MIXED = nodes("rtx-4090", 2, spot=True) + nodes("tpu-v5e", 2, free=4) + nodes("a100-80g", 2) + nodes("ascend-910b", 2)


@st.composite
def big_instances(draw):
    chip_list = draw(priced_chips(max_types=7))
    offers = draw(fleets(chip_list, max_nodes=6, max_free=8))
    req = draw(requests(models=("llama-tiny", "llama-2-7b", "llama-2-13b", "llama-2-70b"), max_budget=200_000_000))
    return req, chip_list, offers


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(big_instances())
def test_every_plan_keeps_the_budget_and_fits_the_free_chips(instance):
    req, chip_list, offers = instance
    throughput = ThroughputModel(simulation_scale=0.5)
    try:
        quote = plan(req, chip_list, offers, throughput)
    except PlanningError as error:
        event(type(error).__name__)
        return
    event("planned")
    if req.max_budget_per_hour is not None:
        assert quote.price_per_hour <= req.max_budget_per_hour
    if req.total_budget is not None:
        assert quote.total_cost <= req.total_budget
    assert 1 <= quote.world_size <= req.max_ranks
    assert len({r.simulated for r in quote.ranks}) == 1  # one backend: CUDA/NCCL or CPU/gloo
    assert sum(r.micro_batch for r in quote.ranks) == quote.global_batch
    assert quote.global_batch == (req.global_batch or req.per_device_batch_size * quote.world_size)
    _assert_ranks_are_free_chips(req, quote, {c.slug: c for c in chip_list}, {n.node_id: n for n in offers})
    memories = [CHIPS[r.chip].memory_gib for r in quote.ranks]
    assert quote.zero_stage == lowest_fitting_stage(req.model, memories, [r.micro_batch for r in quote.ranks])


def _assert_ranks_are_free_chips(req, quote, chip_by_slug, node_by_id):
    used: dict[str, int] = {}
    for rank in quote.ranks:
        node = node_by_id[rank.node_id]
        used[node.node_id] = used.get(node.node_id, 0) + 1
        assert used[node.node_id] <= node.free_chips
        assert rank.chip == node.chip and rank.memory_gib <= chip_by_slug[rank.chip].memory_gib
        if rank.mode == "spot":
            assert node.spot_eligible and (req.allow_spot or req.spot_only)
        else:
            assert not req.spot_only
    price = sum(
        chip_by_slug[r.chip].spot_per_hour if r.mode == "spot" else chip_by_slug[r.chip].on_demand_per_hour
        for r in quote.ranks
    )
    assert price == quote.price_per_hour


def test_money_is_integer_micro_units_rounded_once_half_up():
    quote = plan(request(max_budget_per_hour=yuan(20)), chips(), MIXED)
    total = Decimal(quote.price_per_hour) * Decimal(quote.eta_seconds) / 3600
    assert quote.total_cost == int(total.to_integral_value(rounding=ROUND_HALF_UP))
    per_million = Decimal(quote.price_per_hour) * 10**6 / (Decimal(quote.tokens_per_s) * 3600)
    assert quote.price_per_million_tokens == int(per_million.to_integral_value(rounding=ROUND_HALF_UP))
    body = json.loads(json.dumps(quote.to_dict()))
    assert all(isinstance(body[f], int) for f in ("price_per_hour", "price_per_million_tokens", "total_cost"))
    assert body["eta_seconds"] == pytest.approx(1000 * quote.step_seconds, rel=1e-6)


def test_micro_batches_are_the_speed_proportional_split():
    quote = plan(request(policy="fastest", max_budget_per_hour=yuan(40)), chips(), MIXED)
    assert len({r.chip for r in quote.ranks}) > 1
    model = resolve_model("llama-2-7b")
    caps = [micro_batch_cap(model, CHIPS[r.chip].memory_gib, quote.zero_stage, quote.world_size) for r in quote.ranks]
    expected = split_micro_batches(quote.global_batch, [r.tokens_per_s for r in quote.ranks], caps)
    assert [r.micro_batch for r in quote.ranks] == expected


def test_every_quote_carries_the_best_single_type_plan_with_ratios():
    quote = plan(request(max_budget_per_hour=yuan(28), allow_spot=True), chips(), MIXED)
    baseline = quote.baseline
    assert baseline is not None and len(baseline.chip_counts) == 1
    assert quote.speedup_vs_baseline == pytest.approx(quote.tokens_per_s / baseline.tokens_per_s)
    per_token = quote.price_per_hour / quote.tokens_per_s
    assert quote.cost_ratio_vs_baseline == pytest.approx(per_token / (baseline.price_per_hour / baseline.tokens_per_s))
    assert quote.to_dict()["baseline"]["chip_counts"] == baseline.chip_counts


def test_the_single_type_policy_uses_one_chip_type_and_is_its_own_baseline():
    quote = plan(request(policy="single-type", max_budget_per_hour=yuan(28)), chips(), MIXED)
    assert len(quote.chip_counts) == 1
    assert quote.speedup_vs_baseline == pytest.approx(1.0)
    assert quote.baseline.chip_counts == quote.chip_counts


def test_policies_trade_speed_for_money():
    quotes = {
        p: plan(request(policy=p, max_budget_per_hour=yuan(40)), chips(), MIXED)
        for p in ("fastest", "cost-performance", "cheapest")
    }
    per_token = {p: q.price_per_hour / q.tokens_per_s for p, q in quotes.items()}
    assert quotes["fastest"].tokens_per_s >= quotes["cost-performance"].tokens_per_s >= quotes["cheapest"].tokens_per_s
    assert per_token["cheapest"] <= per_token["cost-performance"] <= per_token["fastest"]


def test_spot_is_used_only_when_allowed_and_exclusively_when_asked():
    on_demand = plan(request(policy="cheapest"), chips(), MIXED)
    with_spot = plan(request(policy="cheapest", allow_spot=True), chips(), MIXED)
    spot_only = plan(request(policy="fastest", spot_only=True, max_budget_per_hour=yuan(40)), chips(), MIXED)
    assert {r.mode for r in on_demand.ranks} == {"on_demand"}
    assert {r.mode for r in with_spot.ranks} == {"spot"}
    assert {r.mode for r in spot_only.ranks} == {"spot"} and {r.chip for r in spot_only.ranks} == {"rtx-4090"}


def test_hand_picked_counts_are_honoured_exactly():
    quote = plan(request(chip_counts={"rtx-4090": 5, "a100-80g": 3}), chips(), MIXED)
    assert {chip: sum(modes.values()) for chip, modes in quote.chip_counts.items()} == {
        "rtx-4090": 5,
        "a100-80g": 3,
    }


def test_it_fills_the_biggest_pool_and_nodes_first():
    offers = nodes("a100-80g", 1, free=2, zone="z2") + nodes("a100-80g", 2, free=8) + nodes("a100-80g", 1, free=3)
    quote = plan(request(chip_counts={"a100-80g": 10}), chips(), offers)
    assert {r.pool for r in quote.ranks} == {"a100-80g-z1"}
    assert [r.node_id for r in quote.ranks].count("a100-80g-z1-000") == 8


def test_the_same_inputs_give_the_same_plan_whatever_their_order():
    first = plan(request(max_budget_per_hour=yuan(30), allow_spot=True), chips(), MIXED).to_dict()
    shuffled = list(MIXED)
    random.Random(7).shuffle(shuffled)
    again = plan(request(max_budget_per_hour=yuan(30), allow_spot=True), list(reversed(chips())), shuffled)
    assert again.to_dict() == first


def test_spot_dearer_than_on_demand_is_not_taken():
    dear_spot = [replace(c, spot_per_hour=c.on_demand_per_hour + 1) for c in chips()]
    quote = plan(request(policy="cheapest", allow_spot=True), dear_spot, MIXED)
    assert {r.mode for r in quote.ranks} == {"on_demand"}


def test_offers_of_chip_types_without_specs_are_ignored():
    quote = plan(request(policy="fastest"), chips("a100-80g"), MIXED)
    assert set(quote.chip_counts) == {"a100-80g"}
