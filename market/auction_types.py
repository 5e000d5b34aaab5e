"""What the auction takes and gives (a bid, a clearing) and how a market and its bids are checked.

Shared by the numpy auction (`market.auction`) and the pure-Python one it replaced
(`market.auction_reference`), which the first falls back to for bids numpy can't hold exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


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


def check_market(capacity: int, floor: int) -> None:
    if not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"Capacity must be a whole number of chips, 0 or more (got {capacity!r}).")
    if not isinstance(floor, int) or floor < 0:
        raise ValueError(f"The floor must be a whole number of micro-units, 0 or more (got {floor!r}).")


def check_bid(bid: Bid) -> None:
    if not isinstance(bid.chips, int) or isinstance(bid.chips, bool) or bid.chips < 1:
        raise ValueError(f"Bid {bid.id}: chips must be a whole number, at least 1 (got {bid.chips!r}).")
    if not isinstance(bid.price, int) or isinstance(bid.price, bool) or bid.price < 0:
        raise ValueError(f"Bid {bid.id}: price must be a whole number of micro-units, 0 or more (got {bid.price!r}).")
    if not math.isfinite(bid.placed_at):
        raise ValueError(f"Bid {bid.id}: placed_at must be a finite number of seconds (got {bid.placed_at!r}).")


def refuse_repeated_ids(ids: Iterable[int]) -> None:
    """Names the first id seen a second time (in the order given)."""
    seen = set()
    for bid_id in ids:
        if bid_id in seen:
            raise ValueError(f"Bid id {bid_id} appears twice; each bid must have its own id.")
        seen.add(bid_id)
