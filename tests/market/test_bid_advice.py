"""Bid advice on crafted price histories: how long a bid would have kept its chips, and how often it won."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from market.advice import PricePoint, advice_curve, bid_advice

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def history(*steps: tuple[float, int]) -> list[PricePoint]:
    """(hours before now, price) pairs: each price holds until the next step, the last until now."""
    return [PricePoint(NOW - timedelta(hours=ago), price) for ago, price in steps]


def test_no_history_says_so():
    advice = bid_advice([], 800_000, NOW)
    assert advice.expected_hours is None and advice.winning_share is None
    assert not advice.has_history
    assert advice.summary().startswith("No history yet")


def test_a_bid_above_every_price_runs_the_whole_history_once():
    advice = bid_advice(history((10, 500_000), (5, 700_000)), 800_000, NOW)
    assert advice.expected_hours == pytest.approx(10)
    assert advice.winning_share == pytest.approx(1)
    assert (advice.runs, advice.history_hours, advice.winning_now) == (1, pytest.approx(10), True)


def test_runs_are_the_stretches_at_or_below_the_bid_and_their_mean_is_the_expectation():
    # 12 h of history: ≤ bid for 2 h, above for 3 h, ≤ bid (exactly at it) for 4 h, above for 3 h.
    steps = history((12, 500_000), (10, 900_000), (7, 600_000), (5, 800_000), (3, 1_000_000))
    advice = bid_advice(steps, 800_000, NOW)
    assert advice.runs == 2
    assert advice.expected_hours == pytest.approx((2 + 4) / 2)
    assert advice.winning_share == pytest.approx(6 / 12)
    assert not advice.winning_now
    assert advice.summary() == "About 3 h uninterrupted on average; winning 50% of the last 12 h (2 runs)."


def test_a_bid_below_every_price_never_wins():
    advice = bid_advice(history((6, 900_000), (2, 1_200_000)), 800_000, NOW)
    assert (advice.expected_hours, advice.winning_share, advice.runs) == (0.0, 0.0, 0)
    assert "would not have won" in advice.summary()


def test_only_the_window_counts_and_the_price_in_force_at_its_start_is_clipped_to_it():
    # A cheap price set 30 days ago, still in force 7 days ago, then 1 h above the bid, then cheap again.
    steps = history((24 * 30, 500_000), (3, 900_000), (2, 500_000))
    advice = bid_advice(steps, 800_000, NOW, days=7)
    assert advice.history_hours == pytest.approx(24 * 7)
    assert advice.runs == 2
    assert advice.expected_hours == pytest.approx((24 * 7 - 3 + 2) / 2)


def test_points_in_any_order_and_after_now_are_handled():
    steps = history((1, 900_000), (4, 500_000)) + [PricePoint(NOW + timedelta(hours=1), 100)]
    advice = bid_advice(steps, 800_000, NOW)
    assert (advice.runs, advice.expected_hours, advice.winning_now) == (1, pytest.approx(3), False)


def test_the_curve_rises_with_the_bid_and_includes_the_extra_levels():
    steps = history((12, 500_000), (10, 900_000), (7, 600_000), (5, 800_000), (3, 1_000_000))
    curve = advice_curve(steps, NOW, extra_bids=[450_000, 2_000_000])
    assert [point.bid for point in curve] == [450_000, 500_000, 600_000, 800_000, 900_000, 1_000_000, 2_000_000]
    hours = [point.expected_hours for point in curve]
    assert hours[0] == 0.0 and hours[-1] == pytest.approx(12)
    assert hours == sorted(hours)  # here a higher bid never survives less


def test_without_history_there_is_no_curve():
    assert advice_curve([], NOW, extra_bids=[500_000]) == []


def test_the_curve_is_thinned_to_a_readable_number_of_levels():
    steps = history(*[(200 - index, 500_000 + index * 1000) for index in range(200)])
    assert len(advice_curve(steps, NOW, days=30)) <= 40
