"""Many measured nodes: past `MAX_KINDS` kinds they are merged, and a merged kind promises no more
than the slowest of its nodes measured (so planning stays fast once a fleet has run for a while)."""

from __future__ import annotations

import random

import pytest

from kernel.modelspecs import resolve_model
from kernel.planner import ThroughputModel, fleet, plan
from kernel.planner.fleet import MAX_KINDS, build_kinds
from kernel.planner.throughput import MEASURED_ON_NODE, NodeMeasure
from tests.support.planner.fleets import chips, nodes, request

TYPES = ("a100-80g", "h100-80g", "rtx-4090")
MODEL = resolve_model("llama-2-7b")


def measured_fleet(measured_per_type: int, others: int = 3, seed: int = 1):
    """Three chip types, 60 nodes each; `measured_per_type` of each measured at its own speed,
    start-up and spread, `others` more only on other models (a start-up time and no speed)."""
    rng = random.Random(seed)
    offers = [node for slug in TYPES for node in nodes(slug, 60, free=8)]
    per_node = {}
    for slug, chip in zip(TYPES, chips(*TYPES), strict=True):
        own = [node for node in offers if node.chip == slug]
        modelled = ThroughputModel().tokens_per_s(MODEL, chip)
        for node in own[:measured_per_type]:
            speed = modelled * rng.uniform(0.5, 3.0)
            per_node[node.node_id] = NodeMeasure(speed, rng.uniform(5, 60), rng.uniform(0, 0.1))
        for node in own[measured_per_type : measured_per_type + others]:
            per_node[node.node_id] = NodeMeasure(0.0, rng.uniform(5, 60))
    return offers, ThroughputModel(per_node=per_node)


def kinds_of(offers, throughput, req=None):
    return build_kinds(req or request("llama-2-7b", max_ranks=10_000), chips(*TYPES), offers, throughput)


def test_a_fleet_within_the_bound_keeps_a_kind_per_measured_node(monkeypatch):
    offers, throughput = measured_fleet(2, others=1)  # 3 types x (unmeasured, 2 measured, 1 other): 12 kinds
    kinds = kinds_of(offers, throughput)
    monkeypatch.setattr(fleet, "MAX_KINDS", 10**9)
    assert len(kinds) == 12 and kinds == kinds_of(offers, throughput)
    assert sum(kind.source == MEASURED_ON_NODE for kind in kinds) == 2 * len(TYPES)


def test_past_the_bound_kinds_are_merged_and_every_free_chip_is_still_offered():
    offers, throughput = measured_fleet(40)
    kinds = kinds_of(offers, throughput)
    assert len(kinds) <= MAX_KINDS
    offered = sorted(slot.node.node_id for kind in kinds for slot in kind.slots)
    assert offered == sorted(node.node_id for node in offers for _ in range(node.free_chips))


def test_a_merged_kind_promises_what_its_slowest_node_measured_and_its_longest_start_up(monkeypatch):
    offers, throughput = measured_fleet(40)
    monkeypatch.setattr(fleet, "MAX_KINDS", 10**9)
    exact = {slot.node.node_id: kind for kind in kinds_of(offers, throughput) for slot in kind.slots}
    monkeypatch.setattr(fleet, "MAX_KINDS", MAX_KINDS)
    merged = kinds_of(offers, throughput)
    assert len(merged) < len(set(map(id, exact.values())))
    for kind in merged:
        members = [exact[slot.node.node_id] for slot in kind.slots]
        assert {member.slug for member in members} == {kind.slug}
        assert {member.source for member in members} == {kind.source}
        assert kind.speed == min(member.speed for member in members)
        assert kind.overhead_s == max(member.overhead_s for member in members)
        assert kind.spread == max(member.spread for member in members)


def test_no_rank_of_a_plan_is_promised_more_than_its_node_measured():
    offers, throughput = measured_fleet(40)
    quote = plan(request("llama-2-7b", policy="fastest"), chips(*TYPES), offers, throughput)
    measured = throughput.per_node
    on_measured = [rank for rank in quote.ranks if measured.get(rank.node_id, NodeMeasure(0.0)).tokens_per_s > 0]
    assert on_measured, "the plan should use measured nodes: the fastest are measured ones"
    for rank in on_measured:
        assert rank.tokens_per_s <= measured[rank.node_id].tokens_per_s


@pytest.mark.parametrize("classes", [3, 20])
def test_each_class_of_kinds_keeps_at_least_one_and_the_shares_fill_the_bound(classes):
    sizes = {(f"chip{i}", "measured-on-node", False): 10 + i for i in range(classes)}
    shares = fleet._shares(sizes, MAX_KINDS)
    assert all(1 <= shares[name] <= sizes[name] for name in sizes)
    assert sum(shares.values()) == max(MAX_KINDS, classes)


def test_runs_are_contiguous_about_equal_in_chips_and_never_empty():
    keys = list("abcdefgh")
    runs = fleet._contiguous(keys, [100, 1, 1, 1, 1, 1, 1, 1], 3)
    assert [key for run in runs for key in run] == keys
    assert runs[0] == ["a"]  # the big kind alone: its nodes don't take on the others' start-up
    assert len(runs) == 3 and all(runs)
    assert fleet._contiguous(list("abc"), [1, 1, 1], 3) == [["a"], ["b"], ["c"]]
