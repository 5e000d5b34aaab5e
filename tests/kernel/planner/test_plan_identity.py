"""Plans are identical to the planner's before it was made fast at 100,000 free chips.

Two references: golden_plans.json, recorded from the old code by make_golden.py (a digest of every
rank, node and float of each plan, or the error and its message; the eight BudgetTooLow messages were
rewritten when amounts in messages went to the cent, #28), and kernel.planner.reference,
the old per-offer grouping and ordering kept runnable, compared plan for plan on fresh instances.

The old code had no bound on the number of kinds; a later, deliberate change merges measured nodes
past `fleet.MAX_KINDS` kinds (tests/kernel/planner/test_kind_bound.py). These comparisons lift that bound,
except the last, which checks that every recorded fleet within it still gets its recorded plan.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.planner import PlanningError, ThroughputModel, fleet, plan
from kernel.planner.fleet import build_kinds
from kernel.planner.reference import reference_kinds, reference_plan
from kernel.planner.throughput import NodeMeasure
from tests.support.planner.fleets import fleets, priced_chips, requests
from tests.support.planner.identity_instances import SIZES, Instance, answer, instances

GOLDEN = json.loads((Path(__file__).resolve().parents[2] / "support/planner/golden_plans.json").read_text())
SHIPPED_BOUND = fleet.MAX_KINDS


@pytest.fixture
def unbounded(monkeypatch):
    """Kinds as the old code made them: no merging of measured nodes."""
    monkeypatch.setattr(fleet, "MAX_KINDS", 10**9)


pytestmark = pytest.mark.usefixtures("unbounded")


@pytest.mark.parametrize("size", list(SIZES))
def test_every_plan_and_error_is_the_one_recorded_before_the_change(size):
    changed = [case.name for case in instances(size) if answer(plan, case) != GOLDEN[case.name]]
    assert changed == []


def test_the_recorded_digest_notices_one_rank_on_another_node():
    case = next(case for case in instances("medium") if "digest" in GOLDEN[case.name])
    moved = _with_first_rank_moved(plan)
    assert answer(moved, case)["digest"] != GOLDEN[case.name]["digest"]


@pytest.mark.parametrize(("size", "how_many"), [("small", 60), ("medium", 12), ("large", 4)])
def test_plans_equal_the_reference_implementation_on_fresh_instances(size, how_many):
    for case in instances(size, seed=7)[:how_many]:
        assert _outcome(plan, case) == _outcome(reference_plan, case), case.name


@pytest.mark.parametrize("size", list(SIZES))
def test_kinds_equal_the_reference_implementation_slot_for_slot(size):
    for case in instances(size, seed=11):
        built = build_kinds(case.request, case.chips, case.offers, case.throughput)
        assert built == reference_kinds(case.request, case.chips, case.offers, case.throughput), case.name


class PerNodeSpeeds(ThroughputModel):
    """A caller with its own per-node differences (the docstring's override): every node is asked."""

    def node_multiplier(self, node):
        return 0.5 if node.hostname.endswith(("1", "3")) else 1.0


def test_a_throughput_model_with_its_own_per_node_speeds_plans_as_the_reference():
    for case in instances("medium", seed=13)[:6]:
        case = replace(case, throughput=PerNodeSpeeds(per_node={case.offers[0].node_id: NodeMeasure(0.0, 5.0)}))
        assert _outcome(plan, case) == _outcome(reference_plan, case), case.name


@st.composite
def small_fleets(draw):
    chip_list = draw(priced_chips(max_types=5))
    return chip_list, draw(fleets(chip_list, max_nodes=6, max_free=8))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_fleets(), requests())
def test_random_small_fleets_plan_as_the_reference(fleet, req):
    chip_list, offers = fleet
    case = Instance("hypothesis", req, chip_list, offers, ThroughputModel(simulation_scale=0.5))
    assert _outcome(plan, case) == _outcome(reference_plan, case)


def test_under_the_kind_bound_only_fleets_past_it_plan_differently(monkeypatch):
    cases = [case for size in SIZES for case in instances(size)]
    past_the_bound = {
        case.name
        for case in cases
        if len(build_kinds(case.request, case.chips, case.offers, case.throughput)) > SHIPPED_BOUND
    }
    monkeypatch.setattr(fleet, "MAX_KINDS", SHIPPED_BOUND)
    changed = {case.name for case in cases if answer(plan, case) != GOLDEN[case.name]}
    assert past_the_bound, "no recorded fleet reaches the bound: this test would check nothing"
    assert changed <= past_the_bound


def _outcome(planner, case: Instance):
    try:
        return planner(case.request, case.chips, case.offers, case.throughput)
    except PlanningError as error:
        return (type(error).__name__, str(error))


def _with_first_rank_moved(planner):
    def moved(*args):
        quote = planner(*args)
        first = quote.ranks[0]
        return replace(quote, ranks=[replace(first, node_id=first.node_id + "x"), *quote.ranks[1:]])

    return moved
