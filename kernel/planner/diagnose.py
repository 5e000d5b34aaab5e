"""Why no plan: errors that name the problem and the numbers, so a user knows what to change.

Checked in the order a user can act on them: hand-picked counts that aren't free, a model that
fits no allowed set of chips (more money can't help; real and simulated chips are never one set),
then a budget below the cheapest plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from kernel.money import format_money
from kernel.planner.evaluate import OBJECTIVES, Candidate, Counts, Evaluator, total_cost
from kernel.planner.fleet import Kind
from kernel.planner.islands import WHY, backend, sides
from kernel.planner.memory import GIB, ZERO_STAGES, activation_bytes_per_sample, fixed_bytes, rank_bytes
from kernel.planner.types import (
    BudgetTooLow,
    ChipInfo,
    InvalidRequest,
    ModelDoesNotFit,
    NoCapacity,
    PlanningError,
    PlanRequest,
)

Optimiser = Callable[..., Candidate | None]


def hand_picked_options(request: PlanRequest, chips: Sequence[ChipInfo], ev: Evaluator) -> list[Counts]:
    """The count vectors for chips picked by hand, one per backend that has them all free (real first),
    or an error saying what isn't available."""
    known = {chip.slug for chip in chips}
    asked = dict(request.chip_counts or {})
    for slug in sorted(asked):
        if slug not in known:
            raise InvalidRequest.of(
                "Unknown chip type '%(chip)s'. Choose from: %(known)s.", chip=slug, known=", ".join(sorted(known))
            )
    if sum(asked.values()) > request.max_ranks:
        raise InvalidRequest.of(
            "%(asked)s chips asked for; a job may use at most %(most)s.",
            asked=sum(asked.values()),
            most=request.max_ranks,
        )
    for slug in sorted(asked):
        free = sum(kind.limit for kind in ev.kinds if kind.slug == slug)
        if free < asked[slug]:
            template = (
                "Asked for %(asked)s × %(chip)s, but only %(free)s spot-eligible %(chip)s chips are free."
                if request.spot_only
                else "Asked for %(asked)s × %(chip)s, but only %(free)s %(chip)s chips are free."
            )
            raise NoCapacity.of(template, asked=asked[slug], chip=slug, free=free)
    sets = sides(ev.kinds, request.islands)
    options = [counts for side in sets if (counts := _placed(asked, ev.kinds, side)) is not None]
    if not options:
        raise NoCapacity.of(
            "%(asked)s are free only on real and simulated nodes together; %(why)s.",
            asked=_describe_asked(asked),
            why=WHY,
        )
    return options


def _placed(asked: dict[str, int], kinds: list[Kind], side: list[int]) -> Counts | None:
    """Fill each type's count from the side's kinds, fastest kind first; None if the side lacks some."""
    counts = [0] * len(kinds)
    for slug, wanted in asked.items():
        for i in side:
            if kinds[i].slug == slug and wanted:
                counts[i] = min(kinds[i].limit, wanted)
                wanted -= counts[i]
        if wanted:
            return None
    return tuple(counts)


def _describe_asked(asked: dict[str, int]) -> str:
    return " + ".join(f"{count} × {slug}" for slug, count in sorted(asked.items()))


def explain_failure(
    request: PlanRequest,
    kinds: list[Kind],
    ev: Evaluator,
    optimiser: Optimiser,
    catalog: Sequence[ChipInfo] = (),
) -> PlanningError:
    """The most useful reason why `ev` found no feasible mix."""
    unbounded = Evaluator(replace(request, total_budget=None), kinds, None)
    if request.chip_counts:
        return _explain_hand_picked(request, kinds, ev, unbounded)
    if not any(_fits_somewhere(request, [kinds[i] for i in side]) for side in sides(kinds, request.islands)):
        if _fits_somewhere(request, kinds):
            return ModelDoesNotFit.of(
                "%(model)s fits only on real and simulated chips together (%(sides)s), and %(why)s.",
                model=request.model.name,
                sides=_describe_sides(kinds),
                why=WHY,
            )
        return _does_not_fit(request, _largest_side(kinds, request.islands), catalog)
    cheapest = _search(request, optimiser, unbounded, "hourly-price")
    if cheapest is None:
        if request.policy == "single-type":
            return ModelDoesNotFit.of(
                "%(model)s fits on no single chip type among the free chips; only a mix of types does. "
                "Choose another policy.",
                model=request.model.name,
            )
        return _does_not_fit(request, _largest_side(kinds, request.islands), catalog)
    single = request.policy == "single-type"
    budget = request.max_budget_per_hour
    if budget is not None and cheapest.price_per_hour > budget:
        template = (
            "The hourly budget %(budget)s/h is below the cheapest single-type plan that fits %(model)s: "
            "%(price)s/h (%(chips)s)."
            if single
            else "The hourly budget %(budget)s/h is below the cheapest plan that fits %(model)s: "
            "%(price)s/h (%(chips)s)."
        )
        return BudgetTooLow.of(
            template,
            budget=format_money(budget),
            model=request.model.name,
            price=format_money(cheapest.price_per_hour),
            chips=_describe(kinds, cheapest.counts),
        )
    if request.total_budget is None:
        return PlanningError.of("No plan found for %(model)s within the limits given.", model=request.model.name)
    hourly = Evaluator(replace(request, total_budget=None), kinds, budget)
    best = _search(request, optimiser, hourly, "cheapest") or cheapest
    template = (
        "The total budget %(budget)s is below the cheapest single-type plan's total for %(steps)s steps: "
        "%(total)s (%(chips)s)."
        if single
        else "The total budget %(budget)s is below the cheapest plan's total for %(steps)s steps: "
        "%(total)s (%(chips)s)."
    )
    return BudgetTooLow.of(
        template,
        budget=format_money(request.total_budget),
        steps=request.max_steps,
        total=format_money(total_cost(best.price_per_hour, best.eta_seconds)),
        chips=_describe(kinds, best.counts),
    )


def _search(request: PlanRequest, optimiser: Optimiser, ev: Evaluator, objective: str) -> Candidate | None:
    """Best mix for an objective; for the single-type policy, the best over one chip type at a time."""
    key = OBJECTIVES[objective]
    if request.policy != "single-type":
        return optimiser(ev, key)
    found = []
    for slug in sorted({kind.slug for kind in ev.kinds}):
        allowed = [i for i, kind in enumerate(ev.kinds) if kind.slug == slug]
        found.append(optimiser(ev, key, allowed))
    return min((c for c in found if c is not None), key=key, default=None)


def _explain_hand_picked(request, kinds, ev: Evaluator, unbounded: Evaluator) -> PlanningError:
    options = hand_picked_options(request, [k.chip for k in kinds], ev)
    # Explain the backend whose chips hold the model when one does: only money stands in its way.
    counts = next((option for option in options if unbounded.evaluate(option) is not None), options[0])
    free = unbounded.evaluate(counts)
    mix = _describe(kinds, counts)
    ranks = sum(counts)
    if ranks > ev.global_batch(ranks):
        return InvalidRequest.of(
            "%(mix)s is %(ranks)s ranks, more than the global batch of %(batch)s.",
            mix=mix,
            ranks=ranks,
            batch=ev.global_batch(ranks),
        )
    if free is None:
        smallest = min(k.chip.memory_gib for k, c in zip(kinds, counts, strict=True) if c)
        need = rank_bytes(request.model, 3, ranks, 1) / GIB
        return ModelDoesNotFit.of(
            "%(model)s does not fit on %(mix)s with a global batch of %(batch)s: at ZeRO-3 a rank needs %(need)s GiB "
            "with one sample; the smallest chip in the mix has %(smallest)s GiB.",
            model=request.model.name,
            mix=mix,
            batch=ev.global_batch(ranks),
            need=f"{need:.1f}",
            smallest=smallest,
        )
    price = free.price_per_hour
    if request.max_budget_per_hour is not None and price > request.max_budget_per_hour:
        return BudgetTooLow.of(
            "%(mix)s costs %(price)s/h, above the hourly budget %(budget)s/h.",
            mix=mix,
            price=format_money(price),
            budget=format_money(request.max_budget_per_hour),
        )
    return BudgetTooLow.of(
        "%(mix)s would cost %(total)s in total, above the total budget %(budget)s.",
        mix=mix,
        total=format_money(total_cost(price, free.eta_seconds)),
        budget=format_money(request.total_budget or 0),
    )


def _fits_somewhere(request: PlanRequest, kinds: list[Kind]) -> bool:
    """Exact: memory caps grow with chip memory, so for each n the n largest chips are the best bet."""
    memories = sorted((k.chip.memory_gib for k in kinds for _ in range(k.limit)), reverse=True)
    act = activation_bytes_per_sample(request.model)
    for n in range(1, min(len(memories), request.max_ranks) + 1):
        fixed = min(fixed_bytes(request.model, stage, n) for stage in ZERO_STAGES)
        caps = [int((m * GIB - fixed) // act) for m in memories[:n]]
        batch = request.global_batch or request.per_device_batch_size * n
        if min(caps) >= 1 and sum(caps) >= batch >= n:
            return True
    return False


def _does_not_fit(request: PlanRequest, kinds: list[Kind], catalog: Sequence[ChipInfo] = ()) -> ModelDoesNotFit:
    """Name the real limit: the chips there are, what each would need spread over all of them (at
    ZeRO-3, the stage that needs least memory), how many have that much, and what would fit."""
    memories = sorted((k.chip.memory_gib for k in kinds for _ in range(k.limit)), reverse=True)
    chips = min(len(memories), request.max_ranks)
    batch = request.global_batch or request.per_device_batch_size * chips
    per_chip = max(math.ceil(batch / chips), 1)
    need = rank_bytes(request.model, 3, chips, per_chip) / GIB
    enough = sum(memory >= need for memory in memories[:chips])
    samples = f"{per_chip} sample{'s' if per_chip > 1 else ''} each"
    message = (
        f"{request.model.name} does not fit on the {len(memories)} chip{'s' if len(memories) > 1 else ''} "
        f"available ({_describe_memory(kinds)}): spread over {chips} at ZeRO-3 ({samples}), every chip "
        f"needs {need:.1f} GiB, and {_how_many(enough, chips)} that much."
    )
    if chips > 1 and enough:
        alone = rank_bytes(request.model, 3, enough, per_chip) / GIB
        message += (
            f" Alone on that one it would need {alone:.1f} GiB."
            if enough == 1
            else f" On those {enough} alone, each would need {alone:.1f} GiB."
        )
    fitting = _what_would_fit(request, catalog or [k.chip for k in kinds])
    if fitting:
        message += f" It would fit on {fitting}."
    return ModelDoesNotFit(message)


def _how_many(enough: int, chips: int) -> str:
    if enough == 0:
        return "none has"
    return f"only {enough} of the {chips} ha{'s' if enough == 1 else 've'}"


def _describe_memory(kinds: list[Kind]) -> str:
    """ "1 × ascend-910b 64 GiB, 2 × rtx-4090 24 GiB" (largest first)"""
    counts: dict[tuple[int, str], int] = {}
    for kind in kinds:
        key = (kind.chip.memory_gib, kind.slug)
        counts[key] = counts.get(key, 0) + kind.limit
    ordered = sorted(counts.items(), key=lambda item: (-item[0][0], item[0][1]))
    return ", ".join(f"{count} × {slug} {memory} GiB" for (memory, slug), count in ordered)


def _what_would_fit(request: PlanRequest, catalog: Sequence[ChipInfo]) -> str:
    """The fewest chips of one catalog type that hold the model at ZeRO-3 with the per-device batch,
    the cheapest such type per hour: "3 × a100-80g (80 GiB; each needs 47.2 GiB)"; empty if none up
    to the job's rank limit."""
    per_chip = request.per_device_batch_size
    for count in range(1, request.max_ranks + 1):
        need = rank_bytes(request.model, 3, count, per_chip) / GIB
        holding = [chip for chip in catalog if chip.memory_gib >= need]
        if holding:
            chip = min(holding, key=lambda c: (c.on_demand_per_hour, c.slug))
            return f"{count} × {chip.slug} ({chip.memory_gib} GiB; each needs {need:.1f} GiB)"
    return ""


def _largest_side(kinds: list[Kind], islands: bool) -> list[Kind]:
    """The kinds of the backend with the most chips (what a does-not-fit message counts across)."""
    return max(
        ([kinds[i] for i in side] for side in sides(kinds, islands)), key=lambda side: sum(k.limit for k in side)
    )


def _describe_sides(kinds: list[Kind]) -> str:
    """ "2 real rtx-4090, 1 simulated rtx-4090" """
    counts: dict[tuple[str, str], int] = {}
    for kind in kinds:
        counts[(backend(kind), kind.slug)] = counts.get((backend(kind), kind.slug), 0) + kind.limit
    return ", ".join(f"{count} {side} {slug}" for (side, slug), count in sorted(counts.items()))


def _describe(kinds: list[Kind], counts: Counts) -> str:
    return " + ".join(f"{c} × {k.slug}" for k, c in zip(kinds, counts, strict=True) if c)
