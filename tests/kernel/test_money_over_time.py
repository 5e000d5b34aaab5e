"""Money over time has one rule, `kernel.money.cost_over` (and `cost_of_integral` for prices that change
within a span): every spelling it replaced gives the same micro-units, so moving onto it changed no charge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing.services.meter import owed
from billing.services.pricing import PriceBook
from fleet.choices import AllocationMode
from kernel.money import MICROSECONDS_PER_HOUR, cost_of_integral, cost_over, round_micros, seconds_covered

T0 = datetime(2026, 1, 1, tzinfo=UTC)
prices = st.integers(0, 10**9)  # up to ¥1,000 a chip-hour
microseconds = st.integers(0, 400 * 24 * 3600 * 10**6)  # up to 400 days


@given(st.integers(-(10**24), 10**24))
def test_an_integral_is_rounded_once_as_round_micros_rounds(integral):
    # Training insurance's spelling until #29: a Decimal sum divided by an hour of microseconds.
    assert cost_of_integral(integral) == round_micros(Decimal(integral) / MICROSECONDS_PER_HOUR)


@given(prices, microseconds)
def test_a_price_over_a_span_costs_what_the_stop_margin_and_unbilled_time_cost(per_hour, us):
    # billing.services.holds' spelling until #29.
    before = round_micros(Decimal(per_hour) * Decimal(us) / 3_600_000_000)
    assert cost_over(per_hour, timedelta(microseconds=us)) == before


@given(prices, st.integers(0, 7 * 24 * 60))
def test_a_hold_of_whole_minutes_costs_what_it_did(per_hour, minutes):
    # hold_needed's spelling until #29 (launch holds and bids' holds).
    assert cost_over(per_hour, timedelta(minutes=minutes)) == round_micros(Decimal(per_hour) * minutes / 60)


@given(st.integers(0, 10**18))
def test_the_market_simulation_rounds_chip_seconds_as_it_did(price_chip_seconds):
    # market.simulation's spelling until #29: integer half up over an hour of seconds.
    assert cost_of_integral(price_chip_seconds * 1_000_000) == (price_chip_seconds + 1800) // 3600


@given(prices, st.integers(1, 512), microseconds)
def test_the_meter_charges_a_steady_price_as_cost_over_prices_it(per_hour, chips, us):
    book = PriceBook([(7, T0, per_hour, per_hour)])
    end = T0 + timedelta(microseconds=us)
    assert owed(book, 7, AllocationMode.ON_DEMAND, chips, T0, end) == cost_over(chips * per_hour, end - T0)


def test_a_span_is_rounded_once_not_per_part():
    # Three thirds of a micro-unit are one micro-unit; three rounded thirds would be none.
    third = timedelta(seconds=1200)
    assert cost_over(1, third) == 0
    assert cost_of_integral(3 * (third // timedelta(microseconds=1))) == 1


def test_how_long_a_balance_lasts_is_the_inverse_of_what_time_costs():
    assert seconds_covered(72_000_000, 7_200_000) == 10 * 3600
    assert cost_over(7_200_000, timedelta(seconds=seconds_covered(72_000_000, 7_200_000))) == 72_000_000
    assert seconds_covered(72_000_000, 0) is None
