"""The columnar auction gives exactly what the pure-Python one gave: same price, same awards, same refusals."""

from __future__ import annotations

import random
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from market.auction import Bid, Clearing, clear, clear_columns
from market.auction_reference import clear_reference

FLOOR = 500_000
CENT = 10_000


def columns_of(bids: list[Bid]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array([b.id for b in bids], dtype=np.int64),
        np.array([b.price for b in bids], dtype=np.int64),
        np.array([b.chips for b in bids], dtype=np.int64),
        np.array([b.placed_at for b in bids], dtype=np.float64),
    )


def assert_same_as_reference(bids: list[Bid], capacity: int, floor: int) -> Clearing:
    expected = clear_reference(bids, capacity, floor)
    assert clear(bids, capacity, floor) == expected
    assert clear_columns(*columns_of(bids), capacity=capacity, floor=floor) == expected
    return expected


def random_market(rng: random.Random, count: int, *, levels: int, times: int) -> list[Bid]:
    """Few price levels and few distinct times, so ties on price and on time are common."""
    ids = rng.sample(range(1, count * 3 + 1), count)
    return [
        Bid(
            bid_id, FLOOR + (rng.randrange(levels) - levels // 4) * CENT, rng.randint(1, 8), float(rng.randrange(times))
        )
        for bid_id in ids
    ]


# Many random markets


@pytest.mark.parametrize("seed", range(60))
def test_random_markets_clear_identically(seed):
    rng = random.Random(seed)
    bids = random_market(
        rng, rng.choice([1, 2, 5, 30, 300, 3_000]), levels=rng.randint(1, 40), times=rng.randint(1, 50)
    )
    asked = sum(b.chips for b in bids if b.price >= FLOOR)
    for capacity in {0, 1, asked // 3, asked // 2, asked - 1, asked, asked + 5}:
        assert_same_as_reference(bids, max(capacity, 0), FLOOR)


bid_rows = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=30).map(lambda p: p * 50_000),
        st.integers(min_value=1, max_value=12),
        st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, 1e9, 7.0]),
    ),
    max_size=40,
)


@given(bid_rows, st.integers(min_value=0, max_value=150), st.integers(min_value=0, max_value=30))
def test_any_small_market_clears_identically(rows, capacity, floor_steps):
    ids = random.Random(len(rows)).sample(range(-50, 200), len(rows))
    bids = [Bid(bid_id, price, chips, placed_at) for bid_id, (price, chips, placed_at) in zip(ids, rows, strict=True)]
    assert_same_as_reference(bids, capacity, floor_steps * 50_000)


# The shapes that matter


def test_ties_at_the_marginal_price_go_by_time_then_id_and_the_last_one_is_split():
    bids = [Bid(9, FLOOR, 3, 5.0), Bid(4, FLOOR, 3, 5.0), Bid(1, FLOOR, 3, 9.0), Bid(7, FLOOR * 2, 2, 0.0)]
    result = assert_same_as_reference(bids, 6, FLOOR)
    assert result.awards == {7: 2, 4: 3, 9: 1}
    assert result.price == FLOOR


def test_a_tie_that_exactly_uses_up_capacity_gives_the_next_tied_bid_nothing():
    bids = [Bid(1, FLOOR, 2, 1.0), Bid(2, FLOOR, 2, 2.0), Bid(3, FLOOR, 2, 3.0)]
    result = assert_same_as_reference(bids, 4, FLOOR)
    assert result.awards == {1: 2, 2: 2}


def test_when_every_eligible_bid_fits_the_price_is_the_floor():
    bids = [Bid(1, FLOOR * 2, 4, 0.0), Bid(2, FLOOR, 4, 0.0), Bid(3, FLOOR - 1, 9, 0.0)]
    result = assert_same_as_reference(bids, 8, FLOOR)
    assert (result.price, result.awards, result.demand) == (FLOOR, {1: 4, 2: 4}, 8)


def test_zero_capacity_awards_nothing_and_prices_at_the_highest_eligible_bid():
    bids = [Bid(1, FLOOR + 3, 1, 0.0), Bid(2, FLOOR, 1, 0.0), Bid(3, FLOOR - 1, 1, 0.0)]
    result = assert_same_as_reference(bids, 0, FLOOR)
    assert (result.price, result.awards) == (FLOOR + 3, {})


def test_bids_below_the_floor_neither_win_nor_set_the_price():
    bids = [Bid(i, FLOOR - i, 5, 0.0) for i in range(1, 50)]
    result = assert_same_as_reference(bids, 10, FLOOR)
    assert (result.price, result.awards, result.demand) == (FLOOR, {}, 0)


def test_a_market_of_distinct_prices_clears_identically():
    rng = random.Random(3)
    bids = [Bid(i, FLOOR + i, rng.randint(1, 8), rng.uniform(0, 86_400)) for i in range(1, 5_001)]
    rng.shuffle(bids)
    result = assert_same_as_reference(bids, sum(b.chips for b in bids) // 2, FLOOR)
    assert result.price > FLOOR


def test_a_market_at_one_price_is_ranked_by_time_then_id():
    rng = random.Random(4)
    bids = [Bid(i, FLOOR, rng.randint(1, 8), float(rng.randrange(100))) for i in range(1, 5_001)]
    rng.shuffle(bids)
    result = assert_same_as_reference(bids, sum(b.chips for b in bids) // 2, FLOOR)
    assert result.price == FLOOR


def test_no_bids_clear_at_the_floor():
    assert clear_columns([], [], [], [], capacity=3, floor=FLOOR) == Clearing(FLOOR, {}, 3, 0)
    assert clear_columns(*columns_of([]), capacity=0, floor=FLOOR) == clear_reference([], 0, FLOOR)


def test_awards_hold_plain_python_ints():
    result = clear_columns(*columns_of([Bid(1, FLOOR, 3, 0.0), Bid(2, FLOOR, 3, 1.0)]), capacity=4, floor=FLOOR)
    assert {type(value) for pair in result.awards.items() for value in pair} == {int}
    assert type(result.price) is int and type(result.demand) is int


# Columns of other dtypes and values numpy can't hold exactly


def test_columns_of_narrower_dtypes_clear_like_int64_ones():
    bids = random_market(random.Random(8), 400, levels=6, times=9)
    ids, prices, chips, placed_at = columns_of(bids)
    narrow = ids.astype(np.uint32), prices.astype(np.int32), chips.astype(np.uint8), placed_at.astype(np.float32)
    assert clear_columns(*narrow, capacity=700, floor=FLOOR) == clear_reference(bids, 700, FLOOR)
    as_ints = placed_at.astype(np.int64)
    assert clear_columns(ids, prices, chips, as_ints, capacity=700, floor=FLOOR) == clear_reference(bids, 700, FLOOR)


def test_values_beyond_64_bits_fall_back_to_exact_python_arithmetic():
    huge = 2**70
    bids = [Bid(huge, huge, huge, 1.0), Bid(2, huge - 1, 3, 0.0), Bid(3, FLOOR, huge, 0.0)]
    result = assert_same_as_reference_for_bids(bids, huge + 1, FLOOR)
    assert result.price == huge - 1


def test_times_that_float64_would_tie_keep_their_exact_order():
    bids = [Bid(1, FLOOR, 2, 2**53 + 1), Bid(2, FLOOR, 2, float(2**53))]
    result = assert_same_as_reference_for_bids(bids, 2, FLOOR)
    assert result.awards == {2: 2}


def test_times_of_other_number_types_are_ranked_as_before():
    bids = [Bid(1, FLOOR, 2, Fraction(1, 3)), Bid(2, FLOOR, 2, 0.3)]
    assert assert_same_as_reference_for_bids(bids, 2, FLOOR).awards == {2: 2}


def assert_same_as_reference_for_bids(bids: list[Bid], capacity: int, floor: int) -> Clearing:
    expected = clear_reference(bids, capacity, floor)
    assert clear(bids, capacity, floor) == expected
    return expected


# Refusals: the same ValueError, naming the same bid


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"chips": 0}, "Bid 7: chips must be a whole number, at least 1 (got 0)"),
        ({"chips": 1.5}, "Bid 7: chips must be a whole number, at least 1 (got 1.5)"),
        ({"chips": True}, "Bid 7: chips must be a whole number, at least 1 (got True)"),
        ({"price": -1}, "Bid 7: price must be a whole number of micro-units, 0 or more (got -1)"),
        ({"price": 2.0}, "Bid 7: price must be a whole number of micro-units, 0 or more (got 2.0)"),
        ({"price": np.int64(5)}, "Bid 7: price must be a whole number"),
        ({"placed_at": float("nan")}, "Bid 7: placed_at must be a finite number of seconds (got nan)"),
        ({"placed_at": float("-inf")}, "Bid 7: placed_at must be a finite number of seconds (got -inf)"),
    ],
)
def test_a_malformed_bid_is_refused_with_the_same_message(fields, message):
    malformed = Bid(**{"id": 7, "price": FLOOR, "chips": 1, "placed_at": 0.0, **fields})
    bids = [Bid(1, FLOOR, 1, 0.0), malformed, Bid(8, FLOOR, 0, 0.0)]
    for clearing in (clear_reference, clear):
        with pytest.raises(ValueError) as refused:
            clearing(bids, 4, FLOOR)
        assert str(refused.value).startswith(message)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (2, 0, "Bid 7: chips must be a whole number, at least 1 (got 0)"),
        (1, -3, "Bid 7: price must be a whole number of micro-units, 0 or more (got -3)"),
        (3, np.inf, "Bid 7: placed_at must be a finite number of seconds (got inf)"),
    ],
)
def test_a_malformed_row_in_numpy_columns_is_refused_with_the_same_message(column, value, message):
    bids = [Bid(1, FLOOR, 1, 0.0), Bid(7, FLOOR, 1, 0.0), Bid(8, FLOOR, 0, 0.0), Bid(1, FLOOR, 1, 0.0)]
    columns = columns_of(bids)
    columns[column][1] = value
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        clear_columns(*columns, capacity=4, floor=FLOOR)


def test_a_float_chip_column_is_refused_like_a_float_chip_count():
    ids, prices, chips, placed_at = columns_of([Bid(1, FLOOR, 1, 0.0), Bid(2, FLOOR, 1, 0.0)])
    with pytest.raises(ValueError, match=r"^Bid 1: chips must be a whole number, at least 1 \(got 1.0\)"):
        clear_columns(ids, prices, chips.astype(np.float64), placed_at, capacity=4, floor=FLOOR)


def test_repeated_ids_are_refused_naming_the_first_one_seen_twice():
    bids = [Bid(5, FLOOR, 1, 0.0), Bid(3, FLOOR, 1, 0.0), Bid(3, FLOOR, 1, 1.0), Bid(5, FLOOR, 1, 1.0)]
    for clearing in (clear_reference, clear):
        with pytest.raises(ValueError, match="^Bid id 3 appears twice; each bid must have its own id.$"):
            clearing(bids, 4, FLOOR)
    with pytest.raises(ValueError, match="^Bid id 3 appears twice"):
        clear_columns(*columns_of(bids), capacity=4, floor=FLOOR)


def test_a_malformed_bid_is_named_before_a_repeated_id():
    bids = [Bid(5, FLOOR, 1, 0.0), Bid(5, FLOOR, 1, 0.0), Bid(6, FLOOR, 0, 0.0)]
    with pytest.raises(ValueError, match="^Bid 6: chips must be a whole number"):
        clear(bids, 4, FLOOR)


def test_a_bad_market_is_refused_before_the_bids_are_read():
    with pytest.raises(ValueError, match="Capacity must be a whole number of chips, 0 or more"):
        clear_columns([1], [FLOOR], [1], [0.0], capacity=-1, floor=FLOOR)
    with pytest.raises(ValueError, match="floor must be a whole number of micro-units, 0 or more"):
        clear_columns([1], [FLOOR], [1], [0.0], capacity=1, floor=1.5)


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="bid columns must all have the same length"):
        clear_columns([1, 2], [FLOOR], [1], [0.0], capacity=1, floor=FLOOR)


def test_a_column_that_is_not_one_dimensional_is_refused():
    with pytest.raises(ValueError, match="must be one-dimensional"):
        clear_columns(np.array([[1, 2]]), [FLOOR], [1], [0.0], capacity=1, floor=FLOOR)
