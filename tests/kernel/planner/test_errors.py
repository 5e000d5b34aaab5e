"""Errors name the problem and the numbers: what doesn't fit, what's too little, what's missing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.planner import (
    BudgetTooLow,
    InvalidRequest,
    ModelDoesNotFit,
    NoCapacity,
    PlanningError,
    plan,
)
from tests.support.planner.fleets import chips, nodes, request, yuan

REPOSITORY = Path(__file__).resolve().parents[3]

MIXED = nodes("rtx-4090", 2, spot=True) + nodes("a100-80g", 1) + nodes("mlu370", 1)


def test_a_model_that_fits_no_chip_says_how_much_it_needs_and_what_would_fit():
    with pytest.raises(
        ModelDoesNotFit,
        match=r"llama-2-70b does not fit on the 8 chips available \(8 × rtx-4090 24 GiB\): spread over 8 at "
        r"ZeRO-3 \(4 samples each\), every chip needs [\d.]+ GiB, and none has that much\. "
        r"It would fit on \d+ × a100-80g \(80 GiB; each needs [\d.]+ GiB\)\.",
    ):
        plan(request("llama-2-70b"), chips(), nodes("rtx-4090", 1))


def test_a_model_that_fits_some_of_the_chips_says_how_many_and_never_contradicts_itself():
    # The demo fleet: one 64 GiB chip can't hold llama-2-7b alone, and the three smaller ones can't share it.
    fleet = nodes("rtx-4090", 1, free=2) + nodes("tpu-v5e", 1, free=1) + nodes("ascend-910b", 1, free=1)
    with pytest.raises(ModelDoesNotFit) as refused:
        plan(request("llama-2-7b"), chips(), fleet)
    message = str(refused.value)
    assert "the 4 chips available (1 × ascend-910b 64 GiB, 2 × rtx-4090 24 GiB, 1 × tpu-v5e 16 GiB)" in message
    need, alone = (float(x) for x in re.findall(r"needs? ([\d.]+) GiB", message)[:2])
    assert "only 1 of the 4 has that much" in message and need <= 64 < alone
    assert re.search(r"It would fit on 2 × ascend-910b \(64 GiB; each needs [\d.]+ GiB\)", message)


def test_a_budget_below_the_cheapest_plan_names_that_plan():
    # The cheapest chip-hour on offer is a spot RTX 4090 at ¥0.50 (MLU370s here sell on-demand at ¥0.90).
    with pytest.raises(
        BudgetTooLow,
        match=r"The hourly budget ¥0\.10/h is below the cheapest plan that fits "
        r"llama-tiny: ¥0\.50/h \(1 × rtx-4090\)",
    ):
        plan(request("llama-tiny", max_budget_per_hour=yuan(0.1), allow_spot=True), chips(), MIXED)
    assert plan(request("llama-tiny", max_budget_per_hour=yuan(0.5), allow_spot=True), chips(), MIXED)


def test_a_total_budget_below_the_cheapest_job_names_its_total():
    with pytest.raises(
        BudgetTooLow,
        match=r"The total budget ¥0\.01 is below the cheapest plan's total for "
        r"1000 steps: ¥[\d.]+",
    ):
        plan(request(total_budget=yuan(0.01)), chips(), MIXED)


def test_no_free_chips_is_no_capacity():
    with pytest.raises(NoCapacity, match="No free chips"):
        plan(request(), chips(), nodes("a100-80g", 2, free=0))


def test_no_spot_capacity_when_only_spot_is_wanted():
    with pytest.raises(NoCapacity, match="No free chips eligible for spot"):
        plan(request(spot_only=True), chips(), nodes("a100-80g", 2))


def test_hand_picked_chips_that_are_not_free_are_refused_with_the_numbers():
    with pytest.raises(NoCapacity, match=r"Asked for 16 × a100-80g, but only 8 a100-80g chips are free"):
        plan(request(chip_counts={"a100-80g": 16}), chips(), MIXED)
    with pytest.raises(NoCapacity, match=r"Asked for 1 × h100-80g, but only 0 h100-80g chips are free"):
        plan(request(chip_counts={"h100-80g": 1}), chips(), MIXED)


def test_hand_picked_chips_that_cannot_hold_the_model_are_refused():
    with pytest.raises(ModelDoesNotFit, match=r"llama-2-13b does not fit on 2 × mlu370"):
        plan(request("llama-2-13b", chip_counts={"mlu370": 2}), chips(), MIXED)


def test_hand_picked_chips_above_the_budget_are_refused():
    with pytest.raises(BudgetTooLow, match=r"8 × a100-80g costs ¥36\.00/h, above the hourly budget ¥10\.00/h"):
        plan(request(chip_counts={"a100-80g": 8}, max_budget_per_hour=yuan(10)), chips(), MIXED)


def test_single_type_says_when_only_a_mix_fits():
    offers = nodes("rtx-4090", 1, free=5) + nodes("tpu-v4", 1, free=1)
    with pytest.raises(ModelDoesNotFit, match="fits on no single chip type"):
        plan(request(per_device_batch_size=1, policy="single-type", max_ranks=6), chips(), offers)
    assert plan(request(per_device_batch_size=1, max_ranks=6), chips(), offers).world_size == 6


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_steps": 0}, "max_steps must be a positive integer, not 0"),
        ({"max_steps": -5}, "max_steps must be a positive integer, not -5"),
        ({"max_steps": True}, "max_steps must be a positive integer, not True"),
        ({"per_device_batch_size": 0}, "per_device_batch_size must be a positive integer, not 0"),
        ({"policy": "greedy"}, "Unknown policy 'greedy'. Choose one of: cost-performance, fastest"),
        ({"max_budget_per_hour": -1}, "max_budget_per_hour must be positive"),
        ({"total_budget": 0}, "total_budget must be positive"),
        ({"max_ranks": 0}, "max_ranks must be a positive integer"),
        ({"chip_counts": {"a100-80g": 0}}, r"chip_counts\['a100-80g'\] must be a positive integer, not 0"),
        ({"chip_counts": {"b200": 1}}, "Unknown chip type 'b200'"),
        ({"chip_counts": {"rtx-4090": 9}, "max_ranks": 8}, "9 chips asked for; a job may use at most 8"),
    ],
)
def test_bad_requests_are_refused_before_any_search(fields, message):
    with pytest.raises(InvalidRequest, match=message):
        plan(request(**fields), chips(), MIXED)


def test_every_planning_error_is_a_value_error_for_the_api_layer():
    assert all(
        issubclass(e, PlanningError) and issubclass(e, ValueError)
        for e in (InvalidRequest, ModelDoesNotFit, BudgetTooLow, NoCapacity)
    )


def test_the_planner_imports_neither_django_nor_torch():
    code = "import sys, kernel.planner; print(sorted(m for m in ('django', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_budget_errors_name_amounts_in_the_configured_currency(settings):
    settings.CURRENCY_SYMBOL = "€"
    with pytest.raises(BudgetTooLow, match=r"The hourly budget €0\.10/h is below the cheapest plan"):
        plan(request("llama-tiny", max_budget_per_hour=yuan(0.1), allow_spot=True), chips(), MIXED)


def test_the_planner_names_amounts_without_django_settings():
    code = (
        "from tests.support.planner.fleets import chips, nodes, request, yuan\n"
        "from kernel.planner import BudgetTooLow, plan\n"
        "try:\n"
        "    plan(request('llama-tiny', max_budget_per_hour=yuan(0.1)), chips(), nodes('rtx-4090', 1))\n"
        "except BudgetTooLow as error:\n"
        "    print(error)\n"
    )
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=REPOSITORY
    )
    assert out.stdout.startswith("The hourly budget ¥0.10/h is below the cheapest plan")
