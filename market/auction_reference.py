"""The spot auction's pure-Python clearing, kept as the reference the columnar one must match.

`market.auction.clear` runs on numpy columns. This is the algorithm it replaced, unchanged: the
tests compare the two on many random markets, and `clear` falls back to it for bids numpy can't
hold exactly (ids, prices or chips that aren't plain ints within 64 bits, times that aren't floats
or ints within 2**53), so such bids keep their old results and error messages.

Bids at or above the floor are ranked by price (highest first), then by time (earliest first),
then by id, and filled in that order until capacity runs out; the marginal bid may be filled in
part. The clearing price is the highest losing bid (the first bid not fully filled), or the floor
when every eligible bid fits.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from itertools import accumulate
from operator import attrgetter

from market.auction_types import Bid, Clearing, check_bid, check_market, refuse_repeated_ids

INF = math.inf
_id, _placed_at = attrgetter("id"), attrgetter("placed_at")


def clear_reference(bids: Iterable[Bid], capacity: int, floor: int) -> Clearing:
    """Clear one round of the auction for `capacity` chips with a reserve price of `floor`."""
    check_market(capacity, floor)
    bids = list(bids)
    # Only the price level where capacity runs out needs ranking: bids above it are filled whole,
    # bids below it get nothing, and bids at it are filled by time, then id.
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
            check_bid(bid)
        if price >= floor:
            chips_at_price[price] += chips
    if len(seen) != len(bids):
        refuse_repeated_ids(map(_id, bids))
    return chips_at_price


def _by_time_then_id(tied: list[Bid]) -> list[Bid]:
    """Bids ranked earliest first, then by id."""
    # Stable sorts on plain keys run several times faster than comparing tuples when 100,000 bids
    # tie at one price; the sort by id is only needed when two bids share a time.
    if len(set(map(_placed_at, tied))) < len(tied):
        tied.sort(key=_id)
    tied.sort(key=_placed_at)
    return tied


def _marginal_price(chips_at_price: dict[int, int], capacity: int) -> int | None:
    """The highest price level at which the chips asked at or above it exceed capacity, if any."""
    levels = sorted(chips_at_price, reverse=True)
    asked = accumulate(map(chips_at_price.__getitem__, levels))
    first_over = bisect_right(list(asked), capacity)
    return levels[first_over] if first_over < len(levels) else None
