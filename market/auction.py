"""The spot auction: a uniform-price clearing of one chip type's bids.

Pure Python, no Django, so the services, the bench and `simulate_market` all run the same code.

Bids at or above the floor are ranked by price (highest first), then by time (earliest first),
then by id, and filled in that order until capacity runs out; the marginal bid may be filled in
part. The clearing price is the highest losing bid (the first bid not fully filled), or the floor
when every eligible bid fits. Every winner pays that one price, which is never above its own bid.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter

INF = math.inf
_id, _placed_at = attrgetter("id"), attrgetter("placed_at")


@dataclass(frozen=True, slots=True)
class Bid:
    """One standing bid: up to `chips` chips at up to `price` micro-units per chip-hour."""

    id: int
    price: int
    chips: int
    placed_at: float


@dataclass(frozen=True)
class Clearing:
    """The outcome of one round: the uniform price and the chips each winning bid gets."""

    price: int
    awards: dict[int, int]
    capacity: int
    demand: int

    @property
    def allocated(self) -> int:
        return sum(self.awards.values())

    def chips_won(self, bid_id: int) -> int:
        return self.awards.get(bid_id, 0)


def clear(bids: Iterable[Bid], capacity: int, floor: int) -> Clearing:
    """Clear one round of the auction for `capacity` chips with a reserve price of `floor`.

    The result depends only on the set of bids, not on the order they come in. `awards` is a
    mapping: compare it as one; its iteration order carries no meaning.
    """
    _check_market(capacity, floor)
    bids = list(bids)
    # Ranking every bid would cost a sort of 100,000 tuples (~175 ms on the dev machine). Only the
    # price level where capacity runs out needs ranking: bids above it are filled whole, bids
    # below it get nothing, and bids at it are filled by time, then id.
    chips_at_price = _chips_at_each_price(bids, floor)
    demand = sum(chips_at_price.values())
    marginal = _marginal_price(chips_at_price, capacity)
    if marginal is None:
        awards = {bid.id: bid.chips for bid in bids if bid.price >= floor}
        return Clearing(price=floor, awards=awards, capacity=capacity, demand=demand)
    awards, tied = {}, []
    for bid in bids:
        if bid.price > marginal:
            awards[bid.id] = bid.chips
        elif bid.price == marginal:
            tied.append(bid)
    remaining = capacity - sum(awards.values())
    for bid in _by_time_then_id(tied):
        if bid.chips > remaining:
            if remaining:
                awards[bid.id] = remaining
            break
        awards[bid.id] = bid.chips
        remaining -= bid.chips
    # Some bid at the marginal price is not filled whole: it is the highest losing bid.
    return Clearing(price=marginal, awards=awards, capacity=capacity, demand=demand)


def _chips_at_each_price(bids: list[Bid], floor: int) -> dict[int, int]:
    """Chips asked at each price at or above the floor; checks every bid on the way."""
    chips_at_price: dict[int, int] = defaultdict(int)
    seen: set[int] = set()
    remember = seen.add
    for bid in bids:
        price, chips = bid.price, bid.chips
        remember(bid.id)
        # Checked here rather than when a Bid is made: a __post_init__ would add ~40% to building
        # 100,000 bids, and this one pass also covers look-alike objects.
        if type(chips) is not int or chips < 1 or type(price) is not int or price < 0 or not -INF < bid.placed_at < INF:
            _check_bid(bid)
        if price >= floor:
            chips_at_price[price] += chips
    if len(seen) != len(bids):
        _refuse_repeated_ids(bids)
    return chips_at_price


def _by_time_then_id(tied: list[Bid]) -> list[Bid]:
    """Bids ranked earliest first, then by id."""
    # Stable sorts on plain keys run several times faster than comparing tuples when 100,000 bids
    # tie at one price; the sort by id is only needed when two bids share a time.
    if len(set(map(_placed_at, tied))) < len(tied):
        tied.sort(key=_id)
    tied.sort(key=_placed_at)
    return tied


def _refuse_repeated_ids(bids: list[Bid]) -> None:
    seen = set()
    for bid in bids:
        if bid.id in seen:
            raise ValueError(f"Bid id {bid.id} appears twice; each bid must have its own id.")
        seen.add(bid.id)


def _marginal_price(chips_at_price: dict[int, int], capacity: int) -> int | None:
    """The highest price level at which the chips asked at or above it exceed capacity, if any."""
    levels = sorted(chips_at_price, reverse=True)
    asked = accumulate(map(chips_at_price.__getitem__, levels))
    first_over = bisect_right(list(asked), capacity)
    return levels[first_over] if first_over < len(levels) else None


def displaced(clearing: Clearing, holding: dict[int, int]) -> dict[int, int]:
    """For bids that hold chips now (bid id -> chips held), how many each must give back.

    A bid keeps what the new clearing awards it; anything it holds beyond that is reclaimed.
    Bids the clearing gives more than they hold are not in the answer (they grow, not shrink).
    """
    give_back = {}
    for bid_id, held in holding.items():
        lost = held - clearing.awards.get(bid_id, 0)
        if lost > 0:
            give_back[bid_id] = lost
    return give_back


def _check_market(capacity: int, floor: int) -> None:
    if not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"Capacity must be a whole number of chips, 0 or more (got {capacity!r}).")
    if not isinstance(floor, int) or floor < 0:
        raise ValueError(f"The floor must be a whole number of micro-units, 0 or more (got {floor!r}).")


def _check_bid(bid: Bid) -> None:
    if not isinstance(bid.chips, int) or isinstance(bid.chips, bool) or bid.chips < 1:
        raise ValueError(f"Bid {bid.id}: chips must be a whole number, at least 1 (got {bid.chips!r}).")
    if not isinstance(bid.price, int) or isinstance(bid.price, bool) or bid.price < 0:
        raise ValueError(f"Bid {bid.id}: price must be a whole number of micro-units, 0 or more (got {bid.price!r}).")
    if not math.isfinite(bid.placed_at):
        raise ValueError(f"Bid {bid.id}: placed_at must be a finite number of seconds (got {bid.placed_at!r}).")
