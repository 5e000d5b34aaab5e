"""Where the spot chart's price axis stops, so that one spike doesn't squeeze every other line flat.

Pure: price paths in, a ceiling out. A price holds from its clearing to the next one, so a spike that lasted
a minute weighs a minute of the window. When the highest price is far above what held 95% of the time, the
axis stops a little above that level and the chart marks what lies beyond it (static/js/spot.js).
"""

from __future__ import annotations

from collections.abc import Sequence

SHARE = 0.95  # the part of the window the axis always shows in full
SPIKE = 1.5  # the highest price is a spike when it is this many times that level, or more
HEADROOM = 1.2  # the axis stops this far above the level


def price_ceiling(paths: Sequence[Sequence[tuple[float, int]]], since: float, now: float) -> int | None:
    """The axis's top for price paths of (time, price) steps within [since, now], or None to show every price.

    A price clearing before `since` counts from `since`.
    """
    held = [(price, seconds) for path in paths for price, seconds in _spans(path, since, now) if seconds > 0]
    total = sum(seconds for _, seconds in held)
    if not held or total <= 0:
        return None
    level = _level(sorted(held), SHARE * total)
    highest = max(price for price, _ in held)
    if level <= 0 or highest < SPIKE * level:
        return None
    return round(level * HEADROOM)


def _spans(path: Sequence[tuple[float, int]], since: float, now: float) -> list[tuple[int, float]]:
    """Each price of a step path with how long it held inside the window."""
    spans = []
    for index, (at, price) in enumerate(path):
        end = path[index + 1][0] if index + 1 < len(path) else now
        seconds = min(end, now) - max(at, since)
        spans.append((price, max(seconds, 0.0)))
    return spans


def _level(held: list[tuple[int, float]], share: float) -> int:
    """The lowest price at or below which the paths stayed for `share` seconds ((price, seconds) sorted by price)."""
    seen = 0.0
    for price, seconds in held:
        seen += seconds
        if seen >= share:
            return price
    return held[-1][0]
