"""What the market looks like now: spot capacity per chip type, who holds spot chips, current prices."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Sum

from billing.models import Price
from fleet.choices import AgentStatus, AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job, Node
from market.models import Bid


def spot_nodes(chip_type_id: int):
    return Node.objects.filter(
        pool__chip_type_id=chip_type_id, spot_eligible=True, agent_status=AgentStatus.ONLINE
    ).order_by("pk")


def spot_capacity(chip_type_id: int, now: datetime) -> int:
    """Spot-eligible chips of this type not held by on-demand work, nor wanted by waiting on-demand jobs.

    A draining node takes no new work, but the spot allocations it runs keep their chips until they end.
    """
    nodes = list(spot_nodes(chip_type_id).values_list("pk", "chips"))
    total = sum(chips for _, chips in nodes)
    on_demand = (
        Allocation.objects.holding(now)
        .filter(node_id__in=[pk for pk, _ in nodes])
        .exclude(mode=AllocationMode.SPOT)
        .aggregate(chips=Sum("chips"))["chips"]
        or 0
    )
    draining = (
        Allocation.objects.open()
        .filter(
            mode=AllocationMode.SPOT,
            node__pool__chip_type_id=chip_type_id,
            node__spot_eligible=True,
            node__agent_status=AgentStatus.DRAINING,
        )
        .aggregate(chips=Sum("chips"))["chips"]
        or 0
    )
    return max(0, total - on_demand - on_demand_waiting(chip_type_id)) + draining


def on_demand_waiting(chip_type_id: int) -> int:
    """Chips of this type that queued on-demand jobs wait for while spot allocations hold them."""
    slug = ChipType.objects.values_list("slug", flat=True).get(pk=chip_type_id)
    waiting = Job.objects.filter(
        status__in=[JobStatus.QUEUED, JobStatus.PLANNING], spot=False, waiting_for__has_key=slug
    )
    return sum(int(job.waiting_for.get(slug, 0)) for job in waiting.only("waiting_for"))


def spot_holdings(chip_type_id: int) -> dict[int, int]:
    """Spot chips of this type each job holds now (open allocations, being billed): {job id: chips}."""
    rows = (
        Allocation.objects.open()
        .filter(chip_type_id=chip_type_id, mode=AllocationMode.SPOT)
        .values("job_id")
        .annotate(chips=Sum("chips"))
    )
    return {row["job_id"]: row["chips"] for row in rows}


def floor_of(chip_type_id: int, now: datetime) -> int | None:
    price = Price.objects.in_force(now).filter(chip_type_id=chip_type_id).first()
    return price.spot_floor_per_hour if price else None


def bid_prices_by_job(chip_type_id: int) -> dict[int, int]:
    """Active bid price per job for this chip type."""
    return dict(Bid.objects.active().filter(chip_type_id=chip_type_id).values_list("job_id", "max_price_per_hour"))


def reserved_for_waiting_bids(exclude_job_id: int | None = None) -> dict[int, int]:
    """Per chip type: chips the auction gave to bids whose jobs don't hold them yet (don't take those)."""
    holdings: dict[tuple[int, int], int] = defaultdict(int)
    for row in (
        Allocation.objects.open()
        .filter(mode=AllocationMode.SPOT)
        .values("job_id", "chip_type_id")
        .annotate(chips=Sum("chips"))
    ):
        holdings[(row["job_id"], row["chip_type_id"])] = row["chips"]
    reserved: dict[int, int] = defaultdict(int)
    for bid in Bid.objects.active().filter(won_chips__gt=0).exclude(job_id=exclude_job_id):
        reserved[bid.chip_type_id] += max(0, bid.won_chips - holdings[(bid.job_id, bid.chip_type_id)])
    return dict(reserved)
