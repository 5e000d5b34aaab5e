"""How the scheduler sees the spot market: which spot chips a job may plan on, and claiming held ones.

- A spot job plans on spot chips of a type only while that type's spot price is within its bid, and
  never on free chips the auction has already given to a higher bid that is still waiting for them.
- When nothing is free, a spot job may claim chips held by lower bids: its bids enter the auction,
  the clearing reclaims the lower bids (with notice), and the job is placed once the chips are free.
- An on-demand job that finds nothing free may claim chips held by spot work: it records what it
  waits for, which the auction takes out of spot capacity, so the lowest bids are reclaimed first.
- A spot job whose owner cancelled its last bid for a chip type is re-planned without that type
  (`replan_spec`), so it neither bids for it again nor runs there on demand.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.services.pricing import current_offers
from fleet.choices import AllocationMode
from fleet.models import Allocation, ChipType, Job, Node
from kernel import planner
from kernel.spec import JobSpec
from market.services.bids import cancelled_chip_types, lapsed_chip_types, sync_job_bids
from market.services.clearing import request_clearing
from market.services.market_state import bid_prices_by_job, reserved_for_waiting_bids
from workers.services.capacity import free_chips, schedulable_nodes


def replan_spec(job: Job) -> JobSpec:
    """The job's spec for a (re-)plan: without the chip types whose last bid its owner cancelled."""
    return JobSpec.of_job(job, cancelled_chip_types(job) if job.spot else ())


def bid_prices(spec: JobSpec) -> dict[str, int]:
    """A quote's bids: the job's spot bid for every chip type."""
    price = spec.spot_bid_per_hour or 0
    return defaultdict(lambda: price)


class ChipView:
    """How one planning sees each node's chips: {node id: (chips it may plan on, offered as spot)}."""

    def __init__(self, extra: dict[int, int] | None = None):
        self.extra = extra or {}  # chips held by others that this planning may claim, per node

    def adjust(self, nodes: list[Node], free: dict[int, int]) -> dict[int, tuple[int, bool]]:
        return {node.pk: (free[node.pk] + self.extra.get(node.pk, 0), node.spot_eligible) for node in nodes}


class MarketView(ChipView):
    """A spot job's view: spot chips only of types priced within its bid, less what waiting higher bids won."""

    def __init__(self, bids: dict[str, int], exclude_job_id: int | None = None, extra: dict[int, int] | None = None):
        super().__init__(extra)
        self.bids = bids
        self.prices = {offer.chip.slug: offer.spot_per_hour for offer in current_offers() if offer.price}
        self.reserve = dict(reserved_for_waiting_bids(exclude_job_id=exclude_job_id))

    @classmethod
    def for_job(cls, job: Job, extra: dict[int, int] | None = None) -> MarketView:
        own = {bid.chip_type.slug: bid.max_price_per_hour for bid in job.bids.active().select_related("chip_type")}
        bids = defaultdict(lambda: job.spot_bid_per_hour or 0, own)
        return cls(bids, exclude_job_id=job.pk, extra=extra)

    def with_extra(self, extra: dict[int, int]) -> MarketView:
        view = copy.copy(self)
        view.extra = extra
        return view

    def affordable(self, slug: str) -> bool:
        price = self.prices.get(slug)
        return price is not None and self.bids[slug] >= price

    def adjust(self, nodes: list[Node], free: dict[int, int]) -> dict[int, tuple[int, bool]]:
        reserve = dict(self.reserve)  # taken node by node; the view itself is not used up
        seen = {}
        for node in nodes:
            chip = node.pool.chip_type
            if not node.spot_eligible or not self.affordable(chip.slug):
                seen[node.pk] = (free[node.pk], False)  # sold on-demand only, as far as this job goes
                continue
            count = free[node.pk] + self.extra.get(node.pk, 0)
            taken = min(count, reserve.get(chip.pk, 0))
            if taken:
                reserve[chip.pk] -= taken
            seen[node.pk] = (count - taken, True)
        return seen


def claim_held_chips(job: Job, quote: Callable[[ChipView], planner.Plan]) -> StoredText | None:
    """Nothing free: try to plan on chips that lower bids (or, for on-demand, spot work) hold, and claim them.

    Returns what the job now waits for, or None when even those chips wouldn't do.
    """
    if job.spot:
        return _outbid_lower_bids(job, quote)
    return _ask_for_spot_chips(job, quote)


def _outbid_lower_bids(job: Job, quote) -> StoredText | None:
    held = _spot_held(exclude_job=job)
    market = MarketView.for_job(job)
    slugs = dict(ChipType.objects.filter(pk__in=held).values_list("pk", "slug"))
    lapsed = lapsed_chip_types(job)  # it won those before and never took them up: no second reclaim
    contestable: dict[int, int] = defaultdict(int)
    for chip_type_id, rows in held.items():
        if chip_type_id in lapsed:
            continue
        slug = slugs[chip_type_id]
        theirs = bid_prices_by_job(chip_type_id)
        for node_id, job_id, chips in rows:
            if theirs.get(job_id, 0) < market.bids[slug]:
                contestable[node_id] += chips
    if not contestable:
        return None
    try:
        plan = quote(market.with_extra(contestable))
    except planner.PlanningError:
        return None
    counts = plan.spot_chip_counts()
    if not counts:
        return None
    with transaction.atomic():
        sync_bids_with_plan(job, plan, timezone.now())
    mix = ", ".join(f"{n}× {slug}" for slug, n in sorted(counts.items()))
    outbid = gettext_noop("outbid lower spot bids for %(chips)s; placing when they have checkpointed and left")
    return StoredText(outbid, chips=mix)


def _ask_for_spot_chips(job: Job, quote) -> StoredText | None:
    held = _spot_held(exclude_job=job)
    if not held:
        return None
    extra: dict[int, int] = defaultdict(int)
    for rows in held.values():
        for node_id, _, chips in rows:
            extra[node_id] += chips
    try:
        plan = quote(ChipView(extra))
    except planner.PlanningError:
        return None
    nodes = list(schedulable_nodes())
    free = free_chips(nodes)
    free_by_type: dict[str, int] = defaultdict(int)
    for node in nodes:
        free_by_type[node.pool.chip_type.slug] += free[node.pk]
    wanted: dict[str, int] = defaultdict(int)
    for rank in plan.ranks:
        wanted[rank.chip] += 1
    waiting = {slug: n - free_by_type[slug] for slug, n in wanted.items() if n > free_by_type[slug]}
    if not waiting:
        return None
    Job.objects.filter(pk=job.pk).update(waiting_for=waiting)
    for chip_type_id in ChipType.objects.filter(slug__in=waiting).values_list("pk", flat=True):
        request_clearing(chip_type_id)
    mix = ", ".join(f"{n}× {slug}" for slug, n in sorted(waiting.items()))
    return StoredText(gettext_noop("reclaiming %(chips)s from spot work (lowest bids first)"), chips=mix)


def _spot_held(exclude_job: Job) -> dict[int, list[tuple[int, int, int]]]:
    """Open spot allocations on schedulable nodes: {chip type id: [(node id, job id, chips)]}."""
    rows = (
        Allocation.objects.open()
        .filter(mode=AllocationMode.SPOT, node__in=schedulable_nodes())
        .exclude(job=exclude_job)
        .values("chip_type_id", "node_id", "job_id")
        .annotate(chips=Sum("chips"))
    )
    held: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for row in rows:
        held[row["chip_type_id"]].append((row["node_id"], row["job_id"], row["chips"]))
    return held


def sync_bids_with_plan(job: Job, plan: planner.Plan, now) -> None:
    """A spot job's bids follow its plan: one per spot chip type it uses (market.services.bids)."""
    sync_job_bids(job, plan.spot_chip_counts(), now)
