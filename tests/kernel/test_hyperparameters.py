"""The learning-rate schedule and the defaults a job gets for its mode and its model's origin."""

from __future__ import annotations

import pytest

from kernel.hyperparameters import PRETRAINED, SCRATCH, Hyperparameters, learning_rate_at, resolve


def rates(hyperparameters: Hyperparameters, total: int) -> list[float]:
    return [learning_rate_at(hyperparameters, step, total) for step in range(total)]


def test_warm_up_rises_to_the_peak_then_the_cosine_falls_to_its_floor():
    schedule = Hyperparameters(learning_rate=1.0, lr_scheduler="cosine", warmup_steps=4, min_lr_ratio=0.1)
    got = rates(schedule, 15)
    assert got[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert got[4] == pytest.approx(1.0) and got[-1] == pytest.approx(0.1)
    assert got[9] == pytest.approx(0.55)  # half-way down the decay: the floor plus half the span
    assert got[4:] == sorted(got[4:], reverse=True)


def test_linear_decays_evenly_and_constant_stays_at_the_peak():
    linear = rates(Hyperparameters(learning_rate=1.0, lr_scheduler="linear", min_lr_ratio=0.0), 5)
    assert linear == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    constant = rates(Hyperparameters(learning_rate=2e-4, lr_scheduler="constant", warmup_ratio=0.5), 4)
    assert constant == pytest.approx([1e-4, 2e-4, 2e-4, 2e-4])


def test_a_warm_up_ratio_counts_whole_steps_and_never_outlasts_the_run():
    assert Hyperparameters(warmup_ratio=0.03).warmup_for(100) == 3
    assert Hyperparameters(warmup_ratio=0.03).warmup_for(10) == 1
    assert Hyperparameters(warmup_steps=50).warmup_for(20) == 20


@pytest.mark.parametrize(
    ("mode", "origin", "parameters", "rate", "decay"),
    [
        ("lora", PRETRAINED, 7_000_000_000, 2e-4, 0.0),
        ("full", PRETRAINED, 7_000_000_000, 2e-5, 0.0),
        ("full", SCRATCH, 200_000, 3e-3, 0.1),
        ("full", SCRATCH, 125_000_000, 6e-4, 0.1),
        ("full", SCRATCH, 7_000_000_000, 1.5e-4, 0.1),
        ("full", SCRATCH, 70_000_000_000, 1e-4, 0.1),
    ],
)
def test_the_defaults_hang_on_the_mode_and_where_the_weights_come_from(mode, origin, parameters, rate, decay):
    resolved = resolve(Hyperparameters(), mode, origin, parameters)
    assert (resolved.learning_rate, resolved.weight_decay) == (rate, decay)
    assert resolved.warmup_ratio is not None


def test_what_the_owner_set_wins_over_the_defaults():
    given = Hyperparameters(learning_rate=1e-3, weight_decay=0.05, warmup_steps=7)
    resolved = resolve(given, "lora", PRETRAINED, 1000)
    assert (resolved.learning_rate, resolved.weight_decay, resolved.warmup_steps) == (1e-3, 0.05, 7)
    assert resolved.warmup_ratio is None  # steps given: no ratio on top


def test_a_stored_dict_round_trips_and_unknown_keys_from_a_newer_version_are_left_out():
    resolved = resolve(Hyperparameters(lr_scheduler="linear"), "full", SCRATCH, 1000)
    assert Hyperparameters.from_dict({**resolved.as_dict(), "from_the_future": 1}) == resolved
