"""Bid advice: how long a spot bid would have run uninterrupted, read off a chip type's clearing price history.

Pure Python, no Django, so it is tested on crafted histories and used by the pages, the API and the
bench alike.

A bid keeps its chips while the clearing price stays at or below it. The history is a step function:
each recorded clearing price holds from its time until the next one (the last until now). Over the
window (the last `days`), the stretches where the price stayed at or below the bid are the runs a
bid would have survived; the advice is their mean length (expected uninterrupted hours), the share
of the window the bid would have been winning, and how much history that rests on. A run still
going at the window's end is counted with the length it has so far, so the estimate errs short.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils.translation import gettext, ngettext

from base.formatting import format_duration

DEFAULT_DAYS = 7
# The curve of hours against bid: at most this many bid levels (the steps of the history's prices).
CURVE_POINTS = 40


@dataclass(frozen=True)
class PricePoint:
    """One recorded clearing: from `at` on, the spot price was `price` micro-units per chip-hour."""

    at: datetime
    price: int


@dataclass(frozen=True)
class BidAdvice:
    """What the history says about one bid.

    `expected_hours`: mean length of the runs the bid would have survived (None without history;
    0.0 when the price was never at or below the bid). `winning_share`: the fraction of the history
    the bid would have been winning (None without history). `history_hours`: how much history the
    numbers rest on; `runs`: how many separate runs it holds; `winning_now`: the price now is at or
    below the bid.
    """

    bid: int
    expected_hours: float | None
    winning_share: float | None
    history_hours: float
    runs: int
    winning_now: bool

    @property
    def has_history(self) -> bool:
        return self.expected_hours is not None

    def summary(self) -> str:
        """One sentence for people: "About 3 h 15 min uninterrupted; winning 64% of the last 7 d (12 runs)"."""
        if not self.has_history:
            return gettext("No history yet: this chip type has no clearing prices to learn from.")
        span = format_duration(self.history_hours * 3600)
        if not self.runs:
            return gettext(
                "Never at or above the clearing price in the last %(span)s: this bid would not have won chips."
            ) % {"span": span}
        said = ngettext(
            "About %(lasts)s uninterrupted on average; winning %(share)s%% of the last %(span)s (%(runs)s run).",
            "About %(lasts)s uninterrupted on average; winning %(share)s%% of the last %(span)s (%(runs)s runs).",
            self.runs,
        )
        return said % {
            "lasts": format_duration(self.expected_hours * 3600),
            "share": round(self.winning_share * 100),
            "span": span,
            "runs": self.runs,
        }


def bid_advice(history: Iterable[PricePoint], bid: int, now: datetime, days: float = DEFAULT_DAYS) -> BidAdvice:
    """The advice for one bid over the last `days` before `now`.

    `history` may hold points before the window (the one in force at its start is used from the start)
    and in any order; points after `now` are ignored.
    """
    spans = price_spans(history, now, days)
    return _advice(spans, bid)


def advice_curve(
    history: Iterable[PricePoint], now: datetime, days: float = DEFAULT_DAYS, extra_bids: Iterable[int] = ()
) -> list[BidAdvice]:
    """Expected uninterrupted hours against bid: one BidAdvice per bid level, cheapest first.

    The hours only change at the prices the history holds, so those are the levels (thinned to
    CURVE_POINTS), plus `extra_bids` (the floor, the on-demand price) to show where they fall.
    """
    spans = price_spans(history, now, days)
    if not spans:
        return []  # no history: no curve, whatever the extra levels
    levels = sorted({price for _, _, price in spans})
    if len(levels) > CURVE_POINTS:
        step = (len(levels) - 1) / (CURVE_POINTS - 1)
        levels = sorted({levels[round(index * step)] for index in range(CURVE_POINTS)})
    bids = sorted(set(levels) | {bid for bid in extra_bids if bid > 0})
    return [_advice(spans, bid) for bid in bids]


def price_spans(history: Iterable[PricePoint], now: datetime, days: float) -> list[tuple[datetime, datetime, int]]:
    """The history as (start, end, price) spans inside (now - days, now], oldest first."""
    since = now - timedelta(days=days)
    points = sorted((point for point in history if point.at <= now), key=lambda point: point.at)
    spans: list[tuple[datetime, datetime, int]] = []
    for index, point in enumerate(points):
        end = points[index + 1].at if index + 1 < len(points) else now
        start = max(point.at, since)
        if end > start:
            spans.append((start, end, point.price))
    return spans


def _advice(spans: Sequence[tuple[datetime, datetime, int]], bid: int) -> BidAdvice:
    if not spans:
        return BidAdvice(bid, None, None, 0.0, 0, False)
    total = winning = 0.0
    runs: list[float] = []
    in_run = False
    for start, end, price in spans:
        hours = (end - start).total_seconds() / 3600
        total += hours
        if price <= bid:
            winning += hours
            if in_run:
                runs[-1] += hours
            else:
                runs.append(hours)
            in_run = True
        else:
            in_run = False
    expected = sum(runs) / len(runs) if runs else 0.0
    return BidAdvice(
        bid=bid,
        expected_hours=expected,
        winning_share=winning / total if total else 0.0,
        history_hours=total,
        runs=len(runs),
        winning_now=spans[-1][2] <= bid,
    )
