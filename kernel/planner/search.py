"""The optimiser: how many ranks of each kind, fast, and within ~1% of exhaustive search.

It climbs from the best few seeds (see `seeds`) of different chip combinations, moving to the
best neighbour until none is better. Neighbours add or drop ranks of one kind (1, 2, 3, 4, 8,
... or all of it, or as many as the budget buys), trade ranks of one kind for another, or give
up ranks of two kinds for a third. The moves repair what the seeds' smooth picture ignores:
ZeRO stages that change with the mix, cross-pool links, micro-batch rounding and memory caps.
A fill that breaks memory is mended before it seeds a climb (drop the chips too small for it,
or widen it rank by rank), and when no seed is feasible at all (memory-bound under a tight
budget or rank cap) a descent on the constraint violation looks for one.

`exhaustive` enumerates every count vector; it is the reference for tests and the benchmark.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence

from kernel.planner.evaluate import Candidate, Counts, Evaluator
from kernel.planner.seeds import ordered_fills, single_kind_sweeps, without_homeless

Key = Callable[[Candidate], tuple]
# Climb from the best seeds of different chip combinations while the climbs stay cheap: small
# fleets (rugged: rounding and memory edges) get several restarts, a 10,000-chip fleet one or two
# (measured: more restarts there found nothing better on 57 random instances).
MIN_SEEDS, MAX_SEEDS, CLIMB_EVALUATIONS = 1, 6, 300
MAX_CLIMBS = 50
REPAIR_STARTS = 3
WIDEN_STEPS = 8
# Kicks are for small jobs, where one sample more or less on a rank moves the step time a lot,
# and stop once the climbs and kicks have spent this many evaluations.
KICK_MAX_RANKS, KICK_EVALUATIONS = 32, 1000
PAIR_SIZES = ((1, 1), (1, 2), (2, 1), (2, 2))


def optimise(ev: Evaluator, key: Key, allowed: Sequence[int] | None = None) -> Candidate | None:
    """The best mix found by seeding, hill-climbing and kicks (None: nothing feasible)."""
    allowed = list(range(len(ev.kinds))) if allowed is None else list(allowed)
    found = _seeds(ev, allowed)
    if not found:
        return None
    spent = ev.evaluations
    climbed = []
    for seed in _diverse(sorted(found.values(), key=key)):
        if len(climbed) >= MIN_SEEDS and ev.evaluations - spent > CLIMB_EVALUATIONS:
            break
        climbed.append(_climb(ev, key, seed, allowed))
    return _kicked(ev, key, min(climbed, key=key), allowed, spent)


def _seeds(ev: Evaluator, allowed: list[int]) -> dict[Counts, Candidate]:
    """Feasible starting points: single-kind sweeps and budget fills (mended if they break memory)."""
    found: dict[Counts, Candidate] = {}
    tried = []
    for counts in single_kind_sweeps(ev, allowed):
        tried.append(counts)
        candidate = ev.evaluate(counts)
        if candidate is not None:
            found[counts] = candidate
    # One chip type on several kinds (nodes at different speeds) may share a pool's fast links.
    by_type: dict[str, list[int]] = {}
    for i in allowed:
        by_type.setdefault(ev.kinds[i].slug, []).append(i)
    subsets = [allowed, *(kinds for kinds in by_type.values() if 1 < len(kinds) < len(allowed))]
    fills = itertools.chain.from_iterable(ordered_fills(ev, subset) for subset in subsets)
    for counts in dict.fromkeys(fills):
        tried.append(counts)
        candidate = ev.evaluate(counts)
        for option in [candidate] if candidate is not None else _made_feasible(ev, counts, allowed):
            found[option.counts] = option
    if found or len(allowed) == 1:  # one kind alone: its sweep already tried every regime edge
        return found
    return _repair(ev, tried, allowed)


def _kicked(ev: Evaluator, key: Key, best: Candidate, allowed: list[int], spent: int) -> Candidate:
    """Iterated local search while evaluations are cheap: add or drop ranks of two kinds and climb
    again from there; rounding makes small mixes rugged, and this steps over the ridges."""
    improved = best.ranks <= KICK_MAX_RANKS
    while improved and ev.evaluations - spent < KICK_EVALUATIONS:
        improved = False
        for kicked in itertools.chain(
            _pair_drops(ev, best.counts, allowed), _pair_adds(ev, best.counts, allowed, PAIR_SIZES)
        ):
            start = ev.evaluate(kicked)
            found = _climb(ev, key, start, allowed) if start is not None else None
            if found is not None and key(found) < key(best):
                best, improved = found, True
                break
            if ev.evaluations - spent >= KICK_EVALUATIONS:
                break
    return best


def _made_feasible(ev: Evaluator, counts: Counts, allowed: list[int]) -> list[Candidate]:
    """An infeasible seed mended two ways: without the kinds too small for it, and widened rank by
    rank (more ranks shard the model thinner, so small chips start to hold a sample)."""
    options = (ev.evaluate(without_homeless(ev, counts)), ev.evaluate(_widened(ev, counts, allowed)))
    return [option for option in options if option is not None]


def _widened(ev: Evaluator, counts: Counts, allowed: list[int]) -> Counts:
    for _ in range(WIDEN_STEPS):
        if ev.evaluate(counts) is not None:
            break
        wider = [moved for moved in (_moved(ev, counts, i, 1) for i in allowed) if moved is not None]
        best = min(wider, key=lambda c: (ev.violation(c), ev.price(c), c), default=None)
        if best is None or ev.violation(best) >= ev.violation(counts):
            break
        counts = best
    return counts


def _diverse(ranked: list[Candidate]) -> list[Candidate]:
    """The best seed of each of the best few chip-kind combinations: climbs from near-copies are wasted."""
    seeds: dict[tuple[bool, ...], Candidate] = {}
    for candidate in ranked:
        support = tuple(c > 0 for c in candidate.counts)
        seeds.setdefault(support, candidate)
        if len(seeds) == MAX_SEEDS:
            break
    return list(seeds.values())


def exhaustive(ev: Evaluator, key: Key, allowed: Sequence[int] | None = None) -> Candidate | None:
    """Every count vector within the rank cap and budget (small instances only)."""
    allowed = set(range(len(ev.kinds))) if allowed is None else set(allowed)
    ranges = [range(kind.limit + 1) if i in allowed else range(1) for i, kind in enumerate(ev.kinds)]
    best = None
    for counts in itertools.product(*ranges):
        if sum(counts) > ev.request.max_ranks:
            continue
        candidate = ev.evaluate(counts)
        if candidate is not None and (best is None or key(candidate) < key(best)):
            best = candidate
    return best


def _repair(ev: Evaluator, starts: list[Counts], allowed: list[int]) -> dict[Counts, Candidate]:
    """No seed is feasible (memory-bound under a tight budget or rank cap): climb on the violation."""
    ranked = sorted(dict.fromkeys(starts), key=lambda c: (ev.violation(c), c))
    for start in ranked[:REPAIR_STARTS]:
        counts = _descend(ev, start, allowed, lambda c: (ev.violation(c), ev.price(c), c))
        candidate = ev.evaluate(counts)
        if candidate is not None:
            return {counts: candidate}
    return {}


def _descend(ev: Evaluator, counts: Counts, allowed: list[int], measure: Callable[[Counts], tuple]) -> Counts:
    best = measure(counts)
    for _ in range(MAX_CLIMBS):
        step = min((measure(moved) for moved in _neighbours(ev, counts, allowed)), default=best)
        if step >= best:
            return counts
        best, counts = step, step[-1]
        if best[0] == 0:
            return counts
    return counts


def _climb(ev: Evaluator, key: Key, start: Candidate, allowed: list[int]) -> Candidate:
    """Best-improvement hill-climbing over add / drop / trade moves (first-improvement was tried:
    it crawls along long slopes one rank at a time)."""
    best, best_key = start, key(start)
    for _ in range(MAX_CLIMBS):
        here = best
        for counts in _neighbours(ev, here.counts, allowed):
            candidate = ev.evaluate(counts)
            if candidate is not None and key(candidate) < best_key:
                best, best_key = candidate, key(candidate)
        if best is here:
            return best
    return best


def _neighbours(ev: Evaluator, counts: Counts, allowed: list[int]) -> Iterator[Counts]:
    moves = itertools.chain(
        _single_moves(ev, counts, allowed), _trades(ev, counts, allowed), _pair_moves(ev, counts, allowed)
    )
    return (moved for moved in moves if moved is not None)


def _single_moves(ev: Evaluator, counts: Counts, allowed: list[int]) -> Iterator[Counts | None]:
    """Add or drop ranks of one kind, drop all of it, or add as many as the budget buys."""
    for i in allowed:
        grow, shrink = _steps(ev, counts[i]), _steps(ev, counts[i], drop=True)
        for delta in (*grow, *(-step for step in shrink), _affordable(ev, counts, i)):
            yield _moved(ev, counts, i, delta) if delta else None


def _trades(ev: Evaluator, counts: Counts, allowed: list[int]) -> Iterator[Counts | None]:
    """Give up ranks of one kind for as many, a few, or as many as the money buys of another."""
    for i, j in itertools.permutations(allowed, 2):
        for step in _steps(ev, counts[i], drop=True):
            less = _moved(ev, counts, i, -step)
            for more in {step, _affordable(ev, less, j), *((1, 2) if step <= 4 else ())}:
                yield _moved(ev, less, j, more) if more else None


def _pair_drops(ev: Evaluator, counts: Counts, allowed: list[int]) -> Iterator[Counts]:
    for i, k in itertools.combinations(allowed, 2):
        for less_i, less_k in PAIR_SIZES:
            fewer = _moved(ev, _moved(ev, counts, i, -less_i), k, -less_k)
            if fewer is not None:
                yield fewer


def _pair_adds(ev: Evaluator, counts: Counts, allowed: list[int], sizes=((1, 1),)) -> Iterator[Counts]:
    for i, k in itertools.combinations(allowed, 2):
        for more_i, more_k in sizes:
            more = _moved(ev, _moved(ev, counts, i, more_i), k, more_k)
            if more is not None:
                yield more


def _pair_moves(ev: Evaluator, counts: Counts, allowed: list[int]) -> Iterator[Counts | None]:
    """One more of two kinds; one or two fewer of two kinds, alone or for what the money buys of a third."""
    yield from _pair_adds(ev, counts, allowed)
    for fewer in _pair_drops(ev, counts, allowed):
        yield fewer
        for j in allowed:
            more = _affordable(ev, fewer, j) if fewer[j] == counts[j] else 0
            yield _moved(ev, fewer, j, more) if more else None


def _steps(ev: Evaluator, have: int, drop: bool = False) -> list[int]:
    """1, 2, 3, 4, 8, 16, ... (small moves polish, big ones cross plateaus); dropping also offers all."""
    limit = have if drop else ev.request.max_ranks
    steps = [s for s in (1, 2, 3) if s <= limit]
    step = 4
    while step <= limit:
        steps.append(step)
        step *= 2
    if drop and have and have not in steps:
        steps.append(have)
    return steps


def _moved(ev: Evaluator, counts: Counts | None, i: int, delta: int) -> Counts | None:
    if counts is None:
        return None
    value = counts[i] + delta
    if value < 0 or value > ev.kinds[i].limit:
        return None
    moved = list(counts)
    moved[i] = value
    return tuple(moved)


def _affordable(ev: Evaluator, counts: Counts, j: int) -> int:
    """How many more ranks of kind j fit the budget and the rank cap."""
    kind, have = ev.kinds[j], counts[j]
    room = min(kind.limit - have, ev.request.max_ranks - sum(counts))
    if room <= 0:
        return 0
    if ev.budget is None:
        return room
    budget_left = ev.budget - ev.price(counts)
    prefix = kind.price_prefix
    return bisect.bisect_right(prefix, prefix[have] + budget_left, have, have + room + 1) - 1 - have
