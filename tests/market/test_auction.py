"""The uniform-price spot auction: worked examples, bad input, and its properties under hypothesis."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.money import to_micros
from market.auction import Bid, Clearing, clear, displaced

YEN = 1_000_000
FLOOR = YEN // 2


def bid(bid_id: int, price: str, chips: int, placed_at: float | None = None) -> Bid:
    return Bid(id=bid_id, price=to_micros(price), chips=chips, placed_at=bid_id if placed_at is None else placed_at)


# Worked examples


def test_price_is_the_floor_when_every_bid_fits():
    result = clear([bid(1, "1.20", 2), bid(2, "0.80", 3)], capacity=8, floor=FLOOR)
    assert result.price == FLOOR
    assert result.awards == {1: 2, 2: 3}
    assert (result.demand, result.allocated) == (5, 5)


def test_price_is_the_floor_when_bids_exactly_fill_capacity():
    result = clear([bid(1, "1.20", 4), bid(2, "0.80", 4)], capacity=8, floor=FLOOR)
    assert result.price == FLOOR
    assert result.awards == {1: 4, 2: 4}


def test_price_is_the_highest_losing_bid_when_capacity_runs_out():
    result = clear(
        [bid(1, "1.20", 4), bid(2, "1.00", 4), bid(3, "0.90", 2), bid(4, "0.70", 1)], capacity=8, floor=FLOOR
    )
    assert result.awards == {1: 4, 2: 4}
    assert result.price == to_micros("0.90")


def test_marginal_bid_is_filled_in_part_and_sets_the_price():
    result = clear([bid(1, "1.20", 6), bid(2, "1.00", 4), bid(3, "0.90", 2)], capacity=8, floor=FLOOR)
    assert result.awards == {1: 6, 2: 2}
    assert result.price == YEN
    assert (result.demand, result.allocated) == (12, 8)


def test_winners_all_pay_the_same_price_at_or_below_their_bid():
    bids = [bid(1, "2.00", 1), bid(2, "1.50", 1), bid(3, "1.10", 1), bid(4, "1.00", 1)]
    result = clear(bids, capacity=3, floor=FLOOR)
    assert result.price == YEN
    assert all(result.price <= b.price for b in bids if b.id in result.awards)


def test_a_tie_on_price_goes_to_the_earlier_bid():
    result = clear([bid(1, "1.00", 4, placed_at=20.0), bid(2, "1.00", 4, placed_at=10.0)], capacity=6, floor=FLOOR)
    assert result.awards == {2: 4, 1: 2}
    assert result.price == YEN


def test_a_tie_on_price_and_time_goes_to_the_lower_id():
    result = clear([bid(9, "1.00", 4, placed_at=5.0), bid(3, "1.00", 4, placed_at=5.0)], capacity=4, floor=FLOOR)
    assert result.awards == {3: 4}


def test_bids_below_the_floor_never_win_nor_set_the_price():
    result = clear([bid(1, "0.90", 2), bid(2, "0.49", 5)], capacity=8, floor=FLOOR)
    assert result.awards == {1: 2}
    assert result.price == FLOOR
    assert result.demand == 2


def test_a_bid_at_the_floor_is_eligible():
    result = clear([bid(1, "0.50", 2)], capacity=1, floor=FLOOR)
    assert result.awards == {1: 1}
    assert result.price == FLOOR


def test_no_capacity_awards_nothing_and_prices_at_the_highest_eligible_bid():
    result = clear([bid(1, "0.90", 2), bid(2, "1.40", 1), bid(3, "0.10", 8)], capacity=0, floor=FLOOR)
    assert result.awards == {}
    assert result.price == to_micros("1.40")
    assert result.allocated == 0


def test_no_bids_clear_at_the_floor():
    assert clear([], capacity=8, floor=FLOOR) == Clearing(price=FLOOR, awards={}, capacity=8, demand=0)
    assert clear([], capacity=0, floor=FLOOR).price == FLOOR


def test_clear_accepts_any_iterable_of_bids():
    result = clear((bid(i, "1.00", 1) for i in range(1, 4)), capacity=2, floor=FLOOR)
    assert result.awards == {1: 1, 2: 1}


# Bad input


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"chips": 0}, "chips must be a whole number, at least 1"),
        ({"chips": -3}, "chips must be a whole number, at least 1"),
        ({"chips": 1.5}, "chips must be a whole number"),
        ({"price": -1}, "price must be a whole number of micro-units, 0 or more"),
        ({"price": 1.25}, "price must be a whole number of micro-units"),
        ({"chips": True}, "chips must be a whole number"),
        ({"placed_at": float("inf")}, "placed_at must be a finite number"),
        ({"placed_at": float("nan")}, "placed_at must be a finite number"),
    ],
)
def test_a_malformed_bid_is_refused_with_a_clear_message(fields, message):
    malformed = Bid(**{"id": 7, "price": YEN, "chips": 1, "placed_at": 0.0, **fields})
    with pytest.raises(ValueError, match=f"Bid 7: {message}"):
        clear([bid(1, "1.00", 1), malformed], capacity=4, floor=FLOOR)


def test_a_malformed_bid_below_the_floor_is_still_refused():
    with pytest.raises(ValueError, match="Bid 2: chips must be a whole number"):
        clear([bid(1, "1.00", 1), Bid(id=2, price=1, chips=0, placed_at=0.0)], capacity=4, floor=FLOOR)


def test_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="Capacity must be a whole number of chips, 0 or more"):
        clear([bid(1, "1.00", 1)], capacity=-1, floor=FLOOR)


def test_negative_floor_is_refused():
    with pytest.raises(ValueError, match="floor must be a whole number of micro-units, 0 or more"):
        clear([bid(1, "1.00", 1)], capacity=1, floor=-5)


def test_two_bids_with_one_id_are_refused():
    with pytest.raises(ValueError, match="Bid id 1 appears twice"):
        clear([bid(1, "1.00", 1), bid(1, "2.00", 1)], capacity=4, floor=FLOOR)


def test_a_look_alike_bid_with_no_chips_is_refused():
    class LooseBid:
        id, price, chips, placed_at = 1, YEN, 0, 0.0

    with pytest.raises(ValueError, match="Bid 1: chips must be a whole number, at least 1"):
        clear([LooseBid()], capacity=4, floor=FLOOR)


# Reclaim decisions


def test_displaced_says_how_many_chips_each_holder_gives_back():
    result = clear([bid(1, "2.00", 4), bid(2, "1.00", 4), bid(3, "0.80", 4)], capacity=6, floor=FLOOR)
    holding = {2: 4, 3: 2, 1: 2}
    assert displaced(result, holding) == {2: 2, 3: 2}


def test_displaced_is_empty_when_every_holder_keeps_its_chips():
    result = clear([bid(1, "2.00", 4)], capacity=6, floor=FLOOR)
    assert displaced(result, {1: 4}) == {}


def test_on_demand_taking_capacity_reclaims_the_lowest_bids_first():
    bids = [bid(1, "2.00", 2), bid(2, "1.50", 2), bid(3, "0.90", 2)]
    before = clear(bids, capacity=6, floor=FLOOR)
    after = clear(bids, capacity=3, floor=FLOOR)
    assert displaced(after, before.awards) == {2: 1, 3: 2}


# Properties

bid_lists = st.lists(
    st.builds(
        lambda price, chips, placed_at: (price, chips, placed_at),
        st.integers(min_value=0, max_value=40).map(lambda p: p * 50_000),
        st.integers(min_value=1, max_value=12),
        st.integers(min_value=0, max_value=20).map(float),
    ),
    max_size=40,
).map(lambda rows: [Bid(id=i, price=p, chips=c, placed_at=t) for i, (p, c, t) in enumerate(rows, start=1)])
capacities = st.integers(min_value=0, max_value=120)
floors = st.integers(min_value=0, max_value=40).map(lambda p: p * 50_000)


def reference_clear(bids: list[Bid], capacity: int, floor: int) -> Clearing:
    """The rules as written: rank every eligible bid, fill in order, price at the first bid not filled whole."""
    ranked = sorted((b for b in bids if b.price >= floor), key=lambda b: (-b.price, b.placed_at, b.id))
    awards, remaining, price = {}, capacity, floor
    for b in ranked:
        won = min(b.chips, remaining)
        if won:
            awards[b.id] = won
        remaining -= won
        if won < b.chips:
            price = b.price
            break
    return Clearing(price=price, awards=awards, capacity=capacity, demand=sum(b.chips for b in ranked))


@given(bid_lists, capacities, floors)
def test_it_matches_ranking_every_bid_and_filling_in_order(bids, capacity, floor):
    assert clear(bids, capacity, floor) == reference_clear(bids, capacity, floor)


@given(bid_lists, capacities, floors)
def test_never_more_chips_than_capacity(bids, capacity, floor):
    result = clear(bids, capacity, floor)
    assert result.allocated <= capacity
    assert result.allocated == min(capacity, result.demand)


@given(bid_lists, capacities, floors)
def test_no_bid_wins_more_than_it_asked_and_every_award_is_at_least_one_chip(bids, capacity, floor):
    asked = {b.id: b.chips for b in bids}
    result = clear(bids, capacity, floor)
    assert all(1 <= won <= asked[bid_id] for bid_id, won in result.awards.items())


@given(bid_lists, capacities, floors)
def test_winners_never_pay_above_their_bid(bids, capacity, floor):
    price_of = {b.id: b.price for b in bids}
    result = clear(bids, capacity, floor)
    assert all(result.price <= price_of[bid_id] for bid_id in result.awards)


@given(bid_lists, capacities, floors)
def test_price_is_never_below_the_floor(bids, capacity, floor):
    assert clear(bids, capacity, floor).price >= floor


@given(bid_lists, capacities, floors)
def test_every_bid_strictly_above_the_price_is_filled_whole(bids, capacity, floor):
    result = clear(bids, capacity, floor)
    for b in bids:
        if b.price > result.price:
            assert result.awards.get(b.id) == b.chips


@given(bid_lists, capacities, floors)
def test_no_bid_below_the_price_wins_anything(bids, capacity, floor):
    result = clear(bids, capacity, floor)
    assert all(b.id not in result.awards for b in bids if b.price < result.price)


@given(bid_lists, capacities, floors, st.randoms(use_true_random=False))
def test_replaying_the_same_bids_in_any_order_gives_the_same_result(bids, capacity, floor, rng):
    shuffled = list(bids)
    rng.shuffle(shuffled)
    assert clear(shuffled, capacity, floor) == clear(bids, capacity, floor)


@given(bid_lists, capacities, floors)
def test_when_demand_fits_the_price_is_the_floor_and_every_eligible_bid_is_filled(bids, capacity, floor):
    result = clear(bids, capacity, floor)
    if result.demand <= capacity:
        assert result.price == floor
        assert result.awards == {b.id: b.chips for b in bids if b.price >= floor}
    else:
        assert result.allocated == capacity


@settings(max_examples=50)
@given(bid_lists, capacities, capacities, floors)
def test_less_capacity_never_lowers_the_price(bids, capacity, other, floor):
    small, large = sorted((capacity, other))
    assert clear(bids, small, floor).price >= clear(bids, large, floor).price


def test_a_large_random_market_replays_identically_when_shuffled():
    rng = random.Random(5)
    bids = [Bid(i, rng.randrange(40) * 50_000, rng.randint(1, 8), float(rng.randrange(100))) for i in range(5_000)]
    expected = reference_clear(bids, 4_000, FLOOR)
    rng.shuffle(bids)
    assert clear(bids, 4_000, FLOOR) == expected
    assert expected.price > FLOOR
