"""Splitting a global batch into per-rank micro-batches in proportion to rank speed.

Each rank r gets the continuous share x_r = clamp(level * speed_r, 1, cap_r), with the level
chosen so the shares sum to the global batch (water-filling: a rank at its memory cap passes
its excess on to the others, a very slow rank still gets one sample). Shares are then rounded
by largest remainder, so the sum is preserved exactly. Ties in the remainder go to the earlier
group of identical ranks, and inside a group to the earlier ranks, which makes the split a pure
function of its inputs.

Ranks with the same speed and cap form a group and are handled together; that is what keeps the
planner's search cheap with hundreds of ranks (one group per chip kind, not one per chip).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupShare:
    """`count` ranks of which the first `extras` get `base + 1` samples and the rest `base`."""

    count: int
    base: int
    extras: int

    @property
    def largest(self) -> int:
        return self.base + (1 if self.extras else 0)


def split_groups(total: int, counts: Sequence[int], speeds: Sequence[float], caps: Sequence[int]) -> list[GroupShare]:
    """Largest-remainder split of `total` samples over groups of identical ranks."""
    _check_feasible(total, counts, caps)
    bases, extras = largest_remainder(total, counts, speeds, caps)
    return [GroupShare(c, b, e) for c, b, e in zip(counts, bases, extras, strict=True)]


def largest_remainder(
    total: int, counts: Sequence[int], speeds: Sequence[float], caps: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(base, extras) per group, unchecked: the planner's inner loop calls this thousands of times."""
    level = _water_level(total, counts, speeds, caps)
    shares = [min(max(level * s, 1.0), cap) for s, cap in zip(speeds, caps, strict=True)]
    bases = [int(x) for x in shares]
    extras = [0] * len(counts)
    left = total - sum(c * b for c, b in zip(counts, bases, strict=True))
    if left:
        order = sorted(range(len(counts)), key=lambda g: (bases[g] - shares[g], g))
        left = _hand_out(left, order, counts, bases, caps, extras)
        if left < 0:
            _take_back(-left, order[::-1], counts, bases, extras)
    return bases, extras


def split_micro_batches(total: int, speeds: Sequence[float], caps: Sequence[int] | None = None) -> list[int]:
    """Per-rank micro-batches (each >= 1 and <= its cap) summing exactly to `total`."""
    caps = list(caps) if caps is not None else [total] * len(speeds)
    keys: dict[tuple[float, int], int] = {}
    for speed, cap in zip(speeds, caps, strict=True):
        keys[(speed, cap)] = keys.get((speed, cap), 0) + 1
    groups = list(keys)
    shares = split_groups(total, list(keys.values()), [g[0] for g in groups], [g[1] for g in groups])
    given = {key: 0 for key in groups}
    result = []
    for speed, cap in zip(speeds, caps, strict=True):
        share = shares[groups.index((speed, cap))]
        result.append(share.base + (1 if given[(speed, cap)] < share.extras else 0))
        given[(speed, cap)] += 1
    return result


def _check_feasible(total: int, counts: Sequence[int], caps: Sequence[int]) -> None:
    ranks = sum(counts)
    room = sum(c * cap for c, cap in zip(counts, caps, strict=True))
    if ranks == 0 or not ranks <= total <= room or min(caps) < 1:
        raise ValueError(f"cannot split {total} samples over {ranks} ranks holding 1..{room} samples")


def _water_level(total: int, counts: Sequence[int], speeds: Sequence[float], caps: Sequence[int]) -> float:
    """The level at which sum(count * clamp(level * speed, 1, cap)) == total."""
    level = total / sum(c * s for c, s in zip(counts, speeds, strict=True))
    if all(1.0 <= level * s <= cap for s, cap in zip(speeds, caps, strict=True)):
        return level  # the common case: no rank at its floor of one sample or at its memory cap
    points = sorted({1.0 / s for s in speeds} | {cap / s for s, cap in zip(speeds, caps, strict=True)})
    low = 0.0
    for high in points:
        if _filled(high, counts, speeds, caps) >= total:
            return _solve_segment(total, low, high, counts, speeds, caps)
        low = high
    return points[-1]


def _filled(level: float, counts: Sequence[int], speeds: Sequence[float], caps: Sequence[int]) -> float:
    return sum(c * min(max(level * s, 1.0), cap) for c, s, cap in zip(counts, speeds, caps, strict=True))


def _solve_segment(total, low, high, counts, speeds, caps) -> float:
    """Inside (low, high] the filled amount is linear in the level: solve it exactly."""
    fixed, slope = 0.0, 0.0
    for c, s, cap in zip(counts, speeds, caps, strict=True):
        if cap / s <= low:
            fixed += c * cap
        elif 1.0 / s >= high:
            fixed += c
        else:
            slope += c * s
    if slope <= 0:
        return high
    return min(max((total - fixed) / slope, low), high)


def _hand_out(left: int, order: list[int], counts, bases, caps, extras) -> int:
    """Give one more sample to ranks by largest remainder; returns what is left (< 0: overshot)."""
    for g in order:
        if left <= 0:
            break
        if bases[g] + 1 <= caps[g]:
            give = min(counts[g], left)
            extras[g] = give
            left -= give
    return left


def _take_back(excess: int, order: list[int], counts, bases, extras) -> None:
    """Only reached when float rounding overshot: remove from the smallest remainders first."""
    for g in order:
        while excess and extras[g]:
            extras[g] -= 1
            excess -= 1
        if excess and bases[g] > 1:
            # Lower the whole group by one and hand back what the group had beyond the excess.
            bases[g] -= 1
            extras[g] = max(counts[g] - excess, 0)
            excess = max(excess - counts[g], 0)
