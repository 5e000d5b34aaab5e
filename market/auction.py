"""The spot auction: a uniform-price clearing of one chip type's bids.

No Django, so the services, the bench and `simulate_market` all run the same code.

Bids at or above the floor are ranked by price (highest first), then by time (earliest first),
then by id, and filled in that order until capacity runs out; the marginal bid may be filled in
part. The clearing price is the highest losing bid (the first bid not fully filled), or the floor
when every eligible bid fits. Every winner pays that one price, which is never above its own bid.

The ranking runs on numpy columns (`clear_columns`), so a market of a million bids clears in a
fraction of a second; `clear` takes Bid objects and turns them into columns. Both give exactly
what the pure-Python algorithm they replaced gives (`market.auction_reference`, which the tests
compare them with), and fall back to it for bids whose fields numpy can't hold exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from market.auction_types import Bid, Clearing, check_bid, check_market, refuse_repeated_ids

__all__ = ["Bid", "Clearing", "check_bid", "check_market", "clear", "clear_columns", "displaced", "refuse_repeated_ids"]

INT64_MAX = int(np.iinfo(np.int64).max)
# Times are ranked as float64: ints beyond this are not all exact in it (2**53 + 1 would tie 2**53).
EXACT_FLOAT_INTS = 2**53


def clear(bids: Iterable[Bid], capacity: int, floor: int) -> Clearing:
    """Clear one round of the auction for `capacity` chips with a reserve price of `floor`.

    The result depends only on the set of bids, not on the order they come in. `awards` is a
    mapping: compare it as one; its iteration order carries no meaning.
    """
    check_market(capacity, floor)
    bids = list(bids)
    # One comprehension per field: about twice as fast as map(attrgetter) on slotted objects.
    ids, prices, chips = [bid.id for bid in bids], [bid.price for bid in bids], [bid.chips for bid in bids]
    placed_at = [bid.placed_at for bid in bids]
    return clear_columns(ids, prices, chips, placed_at, capacity=capacity, floor=floor)


def clear_columns(
    ids: Sequence[int] | np.ndarray,
    prices: Sequence[int] | np.ndarray,
    chips: Sequence[int] | np.ndarray,
    placed_at: Sequence[float] | np.ndarray,
    *,
    capacity: int,
    floor: int,
) -> Clearing:
    """`clear` for bids given as four columns, row i being one bid: the same result, no Bid objects.

    A column may be a list, judged value by value exactly as `clear` judges Bid fields (a float
    price or a bool chip count gets the same ValueError, naming the same first bad bid), or a numpy
    array, judged by its dtype: any integer dtype for ids, prices and chips, a float or integer one
    for `placed_at`; arrays of other dtypes are judged value by value. That is the one difference:
    `clear` refuses a numpy scalar in a Bid field (`np.int64(5)` is not an int), this takes int64 arrays.
    Columns of unequal length, or not one-dimensional, are refused.
    """
    check_market(capacity, floor)
    raw = (ids, prices, chips, placed_at)
    lengths = {len(column) for column in raw}
    if len(lengths) > 1:
        raise ValueError(f"The bid columns must all have the same length (got {[len(c) for c in raw]}).")
    columns = _int_column(ids), _int_column(prices), _int_column(chips), _time_column(placed_at)
    if any(column is None for column in columns) or not _sums_fit(columns[2]):
        return _clear_by_reference(raw, capacity, floor)
    return _clear_arrays(*columns, capacity=capacity, floor=floor)


def _clear_arrays(
    ids: np.ndarray, prices: np.ndarray, chips: np.ndarray, placed_at: np.ndarray, *, capacity: int, floor: int
) -> Clearing:
    """The auction on int64/float64 columns; checks the bids first, as the reference does."""
    _refuse_bad_bids(ids, prices, chips, placed_at)
    eligible = prices >= floor
    eligible_chips = chips[eligible]
    demand = int(eligible_chips.sum())
    if demand <= capacity:
        return Clearing(price=floor, awards=_awards(ids[eligible], eligible_chips), capacity=capacity, demand=demand)
    marginal = _marginal_price(prices[eligible], eligible_chips, capacity)
    # Bids above the marginal price are filled whole, bids below it get nothing, and only the bids
    # at it are ranked (by time, then id) to share what is left.
    above = prices > marginal
    tied = np.flatnonzero(prices == marginal)
    tied = tied[np.lexsort((ids[tied], placed_at[tied]))]
    left = capacity - int(chips[above].sum())
    filled = np.cumsum(chips[tied])
    whole = int(np.searchsorted(filled, left, side="right"))  # tied bids that fit whole, in rank order
    awards = _awards(
        np.concatenate((ids[above], ids[tied[:whole]])), np.concatenate((chips[above], chips[tied[:whole]]))
    )
    part = left - (int(filled[whole - 1]) if whole else 0)
    if part:
        awards[int(ids[tied[whole]])] = part
    # Some bid at the marginal price is not filled whole: it is the highest losing bid.
    return Clearing(price=marginal, awards=awards, capacity=capacity, demand=demand)


def _marginal_price(prices: np.ndarray, chips: np.ndarray, capacity: int) -> int:
    """The highest price at which the chips asked at or above it exceed capacity (there is one).

    Ranked by price alone: within a level the order does not change the running total at the
    level's last bid, so the first bid whose running total passes capacity is at the marginal level.
    """
    highest_first = np.argsort(prices)[::-1]
    asked = np.cumsum(chips[highest_first])
    return int(prices[highest_first[np.searchsorted(asked, capacity, side="right")]])


def _awards(ids: np.ndarray, chips: np.ndarray) -> dict[int, int]:
    return dict(zip(ids.tolist(), chips.tolist(), strict=True))


def _refuse_bad_bids(ids: np.ndarray, prices: np.ndarray, chips: np.ndarray, placed_at: np.ndarray) -> None:
    """The first malformed bid (in column order) is refused, then repeated ids, as `clear` always did."""
    malformed = (chips < 1) | (prices < 0) | ~np.isfinite(placed_at)
    if malformed.any():
        row = int(malformed.argmax())
        check_bid(Bid(ids[row].item(), prices[row].item(), chips[row].item(), placed_at[row].item()))
    ordered = np.sort(ids)
    if (ordered[1:] == ordered[:-1]).any():
        refuse_repeated_ids(ids.tolist())


def _int_column(values: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """The column as int64, or None when some value is not a plain int that fits in 64 bits."""
    if isinstance(values, np.ndarray):
        _check_flat(values)
        if values.dtype.kind == "i":
            return values.astype(np.int64, copy=False)
        if values.dtype.kind == "u" and (not values.size or int(values.max()) <= INT64_MAX):
            return values.astype(np.int64)
        return None
    # A bool is an int to numpy (True would become 1), so the types are checked here, not by numpy.
    if not set(map(type, values)) <= {int}:
        return None
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return None


def _time_column(values: Sequence[float] | np.ndarray) -> np.ndarray | None:
    """The column as float64, or None when some time would not keep its exact order there."""
    if isinstance(values, np.ndarray):
        _check_flat(values)
        kind, size = values.dtype.kind, values.dtype.itemsize
        if kind == "f" and size <= 8:
            return values.astype(np.float64, copy=False)
        if kind in "iu" and (
            not values.size or -EXACT_FLOAT_INTS < int(values.min()) <= int(values.max()) < EXACT_FLOAT_INTS
        ):
            return values.astype(np.float64)
        return None
    types = set(map(type, values))
    if not types <= {float, int}:
        return None
    try:
        times = np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    if int in types and not (np.abs(times) < EXACT_FLOAT_INTS).all():
        return None
    return times


def _check_flat(column: np.ndarray) -> None:
    if column.ndim != 1:
        raise ValueError(f"Each bid column must be one-dimensional (got shape {column.shape}).")


def _sums_fit(chips: np.ndarray) -> bool:
    """Whether any total of these chips fits in int64 (else the reference adds them as Python ints)."""
    return not chips.size or int(chips.max()) <= INT64_MAX // chips.size


def _clear_by_reference(columns: tuple, capacity: int, floor: int) -> Clearing:
    """Bids numpy can't hold exactly: the pure-Python algorithm, which takes any ints and numbers."""
    from market.auction_reference import clear_reference  # only for these rare bids

    rows = (column.tolist() if isinstance(column, np.ndarray) else column for column in columns)
    return clear_reference((Bid(*row) for row in zip(*rows, strict=True)), capacity, floor)


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
