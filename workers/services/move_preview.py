"""Where a running spot job would go if a bid change took its chips: the market asks before the change.

The market (`market.services.moves`) works out that a bid change would take chips from a running job;
only the compute side can plan, so it answers the `bid_move_preview` signal here: the job re-planned
as the scheduler would after the move (its own chips free again, the changed bid and the clearing price
it would leave), nothing placed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from fleet.choices import AllocationMode
from fleet.models import Allocation, ChipType, Job
from kernel import planner
from market.signals import MoveDestination
from workers.services import spot
from workers.services.planning import quote


def preview_move(
    job: Job, chip_type: ChipType, bid_price: int | None, spot_price: int, reserved: int = 0
) -> MoveDestination:
    own: Counter[int] = Counter()
    for node_id, chips in Allocation.objects.open().filter(job=job).values_list("node_id", "chips"):
        own[node_id] += chips
    market = spot.MarketView.for_job(job, extra=dict(own))
    bids = defaultdict(market.bids.default_factory, market.bids)
    spec = spot.replan_spec(job)
    if bid_price is None:  # withdrawn: like the scheduler, the re-plan leaves the chip type out
        spec = replace(spec, excluded_chip_types=tuple(sorted({*spec.excluded_chip_types, chip_type.slug})))
    else:
        bids[chip_type.slug] = bid_price
    market.bids = bids
    market.prices = {**market.prices, chip_type.slug: spot_price}
    market.reserve = {**market.reserve, chip_type.pk: reserved}
    try:
        plan = quote(spec, market)
    except planner.PlanningError as error:
        return MoveDestination("", reason=str(error))
    names = dict(ChipType.objects.values_list("slug", "name"))
    modes = dict(AllocationMode.choices)
    chips = " + ".join(
        f"{count} × {names.get(slug, slug)} ({modes.get(mode, mode).lower()})"
        for slug, per_mode in plan.chip_counts.items()
        for mode, count in sorted(per_mode.items())
    )
    return MoveDestination(chips, plan.price_per_hour, cost_ratio(job.plan, plan))


def cost_ratio(before: planner.Plan | None, after: planner.Plan) -> float | None:
    """The new plan's cost per token against the old one's."""
    if not before or not before.tokens_per_s or not before.price_per_hour or not after.tokens_per_s:
        return None
    return (after.price_per_hour / after.tokens_per_s) / (before.price_per_hour / before.tokens_per_s)
