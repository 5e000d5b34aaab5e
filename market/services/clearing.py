"""Clearing the spot auction of each chip type, keeping its price history, and reclaiming the losers.

One clearing of one chip type runs in one database transaction under a per-type advisory lock, so
a beat tick and a bid change never clear the same market at once; it locks the active bids it
reads (after their jobs: the one lock order, market.services.locks), so a bid cancelled meanwhile
is not awarded chips after its cancel. A clearing that loses a deadlock anyway is run again. Bids are ranked by the
pure auction (`market.auction`); what a job holds beyond what its bid won is reclaimed with notice.

A bid is demand only for chips its job can run on (`market.services.demand`). Chips a bid wins are
the winner's cost from that moment: won chips its job doesn't hold yet are reserved for it and
billed until the job holds them or the bid stops winning them (`market.services.reservations`), so
evicting a rival is never free. And a waiting job's bid that wins chips must see its job take them
up within the take-up time (the notice period, for the chips' holders to leave, plus
SPOT_TAKE_UP_GRACE_S), or it lapses: it leaves the auction (its reservation ends and is charged),
and its job can't bid for that chip type again until it has been placed (`market.services.bids`).
Both apply: billing makes an eviction cost the bidder what the chips cost while they were kept for
it, and the lapse bounds how long a bid can keep chips from everyone without using them (one
reclaim, with notice and insurance, per job and chip type).
"""

from __future__ import annotations

import logging
import zlib
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.deadlocks import retry_on_deadlock
from base.stored_text import StoredText
from billing.services.pricing import record_spot_price
from fleet.choices import MigrationReason
from fleet.models import ChipType
from kernel.money import format_amount
from market import auction
from market.models import Bid, BidStatus, MarketSettings
from market.services.demand import demand_of
from market.services.locks import lock_chip_type_bids
from market.services.market_state import floor_of, on_demand_waiting, spot_capacity, spot_holdings
from market.services.reservations import end_bid_reservations, sync_reservations
from market.signals import SpotLoss, spot_chips_lost

logger = logging.getLogger(__name__)


def clear_all(now: datetime | None = None) -> dict[str, auction.Clearing]:
    """Clear every chip type that has spot capacity, bids or spot allocations."""
    now = now or timezone.now()
    results = {}
    for chip in ChipType.objects.order_by("pk"):
        result = clear_chip_type(chip.pk, now=now)
        if result is not None:
            results[chip.slug] = result
    return results


@retry_on_deadlock()
def clear_chip_type(chip_type_id: int, now: datetime | None = None) -> auction.Clearing | None:
    """One round for one chip type: award chips, record the price, reclaim what was lost."""
    now = now or timezone.now()
    with transaction.atomic():
        _lock_market(chip_type_id)
        floor = floor_of(chip_type_id, now)
        if floor is None:
            return None
        chip = ChipType.objects.get(pk=chip_type_id)
        # A job's end closes its bids. Its jobs first, then the bids, by id: a placement holds its job
        # while it locks the job's bids, and the reservations written below reference the jobs.
        bids = lock_chip_type_bids(chip_type_id)
        # Read after the bids are locked: a placement locks its job's bids too, so this sees its
        # allocations, or it waits for this clearing and ends what it reserved (no second billed twice).
        holdings = spot_holdings(chip_type_id)
        bids = _lapse_untaken(bids, holdings, chip, now)
        capacity = spot_capacity(chip_type_id, now)
        if not bids and not holdings and not capacity:
            return None
        asked = {bid.pk: demand_of(bid.chips, bid.job, chip, holdings.get(bid.job_id, 0)) for bid in bids}
        demand = [bid for bid in bids if asked[bid.pk] > 0]  # a bid its job can't use now is no demand
        # As columns, not one auction.Bid per row: the auction ranks them with numpy either way.
        result = auction.clear_columns(
            [bid.pk for bid in demand],
            [bid.max_price_per_hour for bid in demand],
            [asked[bid.pk] for bid in demand],
            [bid.placed_at.timestamp() for bid in demand],
            capacity=capacity,
            floor=floor,
        )
        _store_awards(bids, result, holdings, now)
        sync_reservations(bids, holdings, now)
        _record_price(chip_type_id, result, floor, now)
        bid_of_job = {bid.job_id: bid for bid in bids}
        losers = {
            job_id: held - result.chips_won(bid_of_job[job_id].pk) if job_id in bid_of_job else held
            for job_id, held in holdings.items()
        }
        losers = {job_id: lost for job_id, lost in losers.items() if lost > 0}
        if losers:
            losses = _losses(chip, losers, bid_of_job, result, on_demand_waiting(chip_type_id))
            transaction.on_commit(lambda: _announce_losses(chip_type_id, losses))
    return result


def _lock_market(chip_type_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [zlib.crc32(b"spot-market"), chip_type_id])


def take_up_seconds() -> int:
    """How long a waiting job has to hold chips its bid won: its rivals' notice, then the grace."""
    return MarketSettings.load().notice_seconds + settings.SPOT_TAKE_UP_GRACE_S


def _lapse_untaken(bids: list[Bid], holdings: dict[int, int], chip: ChipType, now: datetime) -> list[Bid]:
    """Bids that won chips their job did not take up within the take-up time leave the auction.

    The clock starts when a bid first wins chips its job doesn't hold and stops only when the job
    holds chips of this type: a bid lowered and raised again (or outbid meanwhile) keeps its clock,
    so it can't reclaim a rival's chips over and over without ever using them.
    """
    deadline = now - timedelta(seconds=take_up_seconds())
    lapsed = [
        bid for bid in bids if bid.waiting_since and bid.waiting_since <= deadline and not holdings.get(bid.job_id)
    ]
    if not lapsed:
        return bids
    Bid.objects.filter(pk__in=[bid.pk for bid in lapsed]).update(
        status=BidStatus.LAPSED, won_chips=0, waiting_since=None, updated_at=now
    )
    end_bid_reservations([bid.pk for bid in lapsed], now)  # billed up to the lapse
    for bid in lapsed:
        logger.warning(
            "bid %s of job %s lapsed: it won %s chip(s) the job did not take up within %ss",
            bid.pk,
            bid.job_id,
            chip.slug,
            take_up_seconds(),
        )
    return [bid for bid in bids if bid not in lapsed]


def _store_awards(bids: list[Bid], result: auction.Clearing, holdings: dict[int, int], now: datetime) -> None:
    changed = []
    for bid in bids:
        won = result.chips_won(bid.pk)
        held = holdings.get(bid.job_id, 0)
        waiting_since = None if held else bid.waiting_since or (now if won > 0 else None)
        if (bid.won_chips, bid.clearing_price, bid.waiting_since) != (won, result.price, waiting_since):
            bid.won_chips, bid.clearing_price, bid.waiting_since = won, result.price, waiting_since
            changed.append(bid)
    if changed:
        Bid.objects.bulk_update(changed, ["won_chips", "clearing_price", "waiting_since"])


def _record_price(chip_type_id: int, result: auction.Clearing, floor: int, now: datetime) -> None:
    record_spot_price(
        chip_type_id,
        now,
        price=result.price,
        floor=floor,
        capacity=result.capacity,
        demand=result.demand,
        allocated=result.allocated,
    )


def _losses(chip, losers, bid_of_job, result, on_demand_wait) -> list[SpotLoss]:
    """Why each losing job may not keep its chips, in words for its owner."""
    losses = []
    for job_id, lost in sorted(losers.items()):
        bid = bid_of_job.get(job_id)
        if bid is None:
            reason = MigrationReason.BID_CANCELLED
            detail = StoredText(gettext_noop("its bid for %(chip)s was cancelled"), chip=chip.slug)
        elif on_demand_wait and bid.max_price_per_hour >= result.price:
            reason = MigrationReason.ON_DEMAND
            detail = StoredText(
                gettext_noop("%(chips)s %(chip)s chip(s) are needed for on-demand work"), chips=lost, chip=chip.slug
            )
        else:
            reason = MigrationReason.OUTBID
            detail = StoredText(
                gettext_noop(
                    "higher bids took %(chips)s of its %(chip)s chip(s): the spot price cleared at %(price)s/h; "
                    "its bid is %(bid)s/h"
                ),
                chips=lost,
                chip=chip.slug,
                price=format_amount(result.price),
                bid=format_amount(bid.max_price_per_hour),
            )
        losses.append(SpotLoss(job_id=job_id, chips=lost, reason=reason, detail=detail))
    return losses


def _announce_losses(chip_type_id: int, losses: list[SpotLoss]) -> None:
    """After commit: the jobs that lost chips get notice (market.signals; the next clearing repeats it)."""
    notice = MarketSettings.load().notice_seconds
    for loss in losses:
        logger.info("job %s loses %s chip(s) of type %s: %s", loss.job_id, loss.chips, chip_type_id, loss.detail)
    spot_chips_lost.send(
        sender=SpotLoss, chip_type_id=chip_type_id, losses=losses, notice_seconds=notice, now=timezone.now()
    )


@shared_task(name="market.tasks.clear_market", ignore_result=True, soft_time_limit=30)
def clear_market(chip_type_id: int | None = None) -> None:
    """Clear one chip type's auction (after a bid change), or every one (the beat, every few seconds)."""
    if chip_type_id is None:
        clear_all()
    else:
        clear_chip_type(chip_type_id)


def request_clearing(chip_type_id: int) -> None:
    """Clear this chip type's market as soon as the caller's transaction commits."""
    clear_market.delay_on_commit(chip_type_id)
