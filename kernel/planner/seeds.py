"""Where the optimiser starts: single-kind plans at their regime edges, and budget fills.

Ignoring rounding, a mix is worth a function of three sums over its ranks: speed S, price P and
rank count n (seconds per token = 1/S + comm / (batch x n)). The best mixes of such problems
take kinds whole in the order of a score (speed + lambda) / price and leave at most a couple of
kinds partly used; lambda is what one more rank is worth (> 0: collectives amortised over a
bigger global batch; < 0: the rank cap binds or slow ranks hold the step back). Orders only
change where two kinds' scores cross, so a handful of lambdas yield every distinct order.
Memory is not in that score, so fills skip chips too small to hold a sample of the model.

For one kind alone the objective is monotone in its count between the counts where its price
tier, its number of pools or its ZeRO stage changes, so those edges (and a few small counts)
are the seeds that matter.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator

from kernel.planner.evaluate import Counts, Evaluator
from kernel.planner.memory import ZERO_STAGES

Segment = tuple[int, int, int, int]


def single_kind_sweeps(ev: Evaluator, allowed: list[int]) -> Iterator[Counts]:
    """For each kind alone: small counts, powers of two, the most the budget buys, and both sides of
    every count where the price tier, the number of pools or the ZeRO stage changes (between such
    points a single kind's objective is monotone in its count, so the climb finishes the job)."""
    for i in allowed:
        for count in sorted(_single_kind_counts(ev, i)):
            yield _unit(len(ev.kinds), i, count)


def _single_kind_counts(ev: Evaluator, i: int) -> set[int]:
    if ("sweep", i) not in ev.memo:
        ev.memo[("sweep", i)] = _regime_edges(ev, i)
    return ev.memo[("sweep", i)]


def _regime_edges(ev: Evaluator, i: int) -> set[int]:
    kind = ev.kinds[i]
    top = kind.limit
    if ev.budget is not None:
        top = bisect.bisect_right(kind.price_prefix, ev.budget) - 1
    top = min(top, ev.request.max_ranks, ev.request.global_batch or top)
    counts = set(range(1, min(top, 8) + 1)) | {top} | {2**p for p in range(top.bit_length())}
    regime = [(kind.unit_price(n), len(kind.pools_prefix[n])) for n in range(1, top + 1)]
    for n in range(1, top):
        if regime[n - 1] != regime[n]:  # n and n + 1 chips differ in price tier or pools
            counts |= {n, n + 1}
    for stage in ZERO_STAGES:
        # Wider jobs shard more, so "fits at this stage or lower" is monotone in the count:
        # `below` ranks don't fit, `below + 1` do.
        below = bisect.bisect_left(range(1, top + 1), True, key=lambda n: ev.single_kind_stage(i, n) <= stage)
        counts |= {below, below + 1}
    return {c for c in counts if 1 <= c <= top}


def _unit(size: int, index: int, count: int) -> Counts:
    counts = [0] * size
    counts[index] = count
    return tuple(counts)


def _segments(ev: Evaluator, allowed: list[int]) -> list[Segment]:
    """(kind, first count, last count, unit price): a kind's chips at one price (spot, on-demand)."""
    return [segment for i in allowed for segment in _kind_segments(ev, i)]


def _kind_segments(ev: Evaluator, i: int) -> list[Segment]:
    if ("segments", i) not in ev.memo:
        kind, start, segments = ev.kinds[i], 1, []
        for count in range(2, kind.limit + 2):
            if count > kind.limit or kind.unit_price(count) != kind.unit_price(start):
                segments.append((i, start, count - 1, kind.unit_price(start)))
                start = count
        ev.memo[("segments", i)] = segments
    return ev.memo[("segments", i)]


def _lambdas(ev: Evaluator, segments: list[Segment]) -> list[float]:
    """One lambda inside each interval where the order of (speed + lambda) / price is constant.

    lambda > 0 favours more ranks (collectives amortised over a bigger global batch); lambda < 0
    favours fewer, faster ranks (the rank cap binds, or slow ranks bottleneck the step).
    """
    speeds = {ev.kinds[i].speed for i, *_ in segments}
    floor = -max(speeds)
    cuts = {0.0} | {-speed for speed in speeds}  # where a kind starts to be worth a rank at all
    for (i, _, _, p), (j, _, _, q) in itertools.combinations(segments, 2):
        if p != q:
            cut = (ev.kinds[j].speed * p - ev.kinds[i].speed * q) / (q - p)
            if cut > floor:
                cuts.add(cut)
    ordered = sorted(cuts)
    mids = [(a + b) / 2 for a, b in itertools.pairwise(ordered)]
    return [*mids, ordered[-1] * 2 + 1.0, math.inf]


def ordered_fills(ev: Evaluator, allowed: list[int]) -> Iterator[Counts]:
    """Fill the budget and rank cap segment by segment in each score order; yield every prefix."""
    segments = _segments(ev, allowed)
    if not segments:
        return
    seen: set[tuple[int, ...]] = set()
    for lam in _lambdas(ev, segments):
        keys = {s: _score_key(ev, segments[s], lam) for s in range(len(segments))}
        order = tuple(sorted(keys, key=keys.__getitem__))
        if order not in seen:
            seen.add(order)
            for strict in (False, True):
                yield from _fill(ev, [segments[s] for s in order], strict)


def _score_key(ev: Evaluator, segment: Segment, lam: float) -> tuple:
    """Sort key: best (speed + lambda) / price first; lambda = inf orders by price alone."""
    i, start, _, price = segment
    speed = ev.kinds[i].speed
    value = (1.0 if lam == math.inf else (speed + lam)) / max(price, 1)
    return (-value, -speed if lam == math.inf else 0.0, i, start)


def _fill(ev: Evaluator, segments: list[Segment], strict: bool) -> Iterator[Counts]:
    """Take segments in order as far as budget and rank cap allow, skipping chips too small for the
    model: in the widest job the fill could make, or (strict) in the job made so far."""
    counts = [0] * len(ev.kinds)
    money = ev.budget
    room = ev.request.max_ranks
    widest = min(room, sum(end - start + 1 for _, start, end, _ in segments))
    for i, start, end, price in segments:
        if counts[i] != start - 1 or room == 0:
            continue
        affordable = room if money is None or price == 0 else money // price
        take = min(end - start + 1, room, affordable)
        if take <= 0 or not ev.holds_a_sample(i, ev.request.max_ranks - room + take if strict else widest):
            continue
        counts[i] += take
        money = None if money is None else money - take * price
        room -= take
        yield tuple(counts)


def without_homeless(ev: Evaluator, counts: Counts) -> Counts:
    """The mix minus the kinds that can't hold one sample in it (a fill may add chips too small)."""
    kept = list(counts)
    while sum(kept):
        homeless = [i for i, c in enumerate(kept) if c and not ev.holds_a_sample(i, sum(kept))]
        if not homeless:
            break
        for i in homeless:
            kept[i] = 0
    return tuple(kept)
