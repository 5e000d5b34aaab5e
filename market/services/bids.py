"""Placing, changing and cancelling bids; every change clears that chip type's market at once.

A bid is placed or changed only for chips its job could use (`market.services.demand`), and only
when the owner's balance holds a few minutes of it on top of everything the owner's bids and
queued jobs already hold, decided under the owner's credit lock so concurrent bids can't overdraw.
Cancelling a bid, or its job's end, ends and charges the chips kept for it since it won them
(`market.services.reservations`).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max, OuterRef, Subquery, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.models import OperatorSettings
from billing.services.holds import lock_credit
from billing.services.ledger import balance_of
from fleet.models import Allocation, ChipType, Job, Node
from kernel.money import format_amount, format_money, format_price
from market.models import Bid, BidStatus
from market.services.clearing import request_clearing
from market.services.commitments import bid_hold, commitments
from market.services.demand import chip_limit
from market.services.locks import lock_bid, lock_job_bids
from market.services.market_state import floor_of
from market.services.reservations import end_bid_reservations, end_job_reservations


class BidRefused(Exception):
    """A bid that can't be placed or changed; `field` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def place_bid(owner, *, job: Job, chip_type: ChipType, chips: int, max_price_per_hour: int, now=None) -> Bid:
    now = now or timezone.now()
    if job.owner_id != owner.pk:
        raise BidRefused("job", _("Job %(id)s not found.") % {"id": job.pk})
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        _check_usable(job, chip_type, chips)
        if Bid.objects.active().filter(job=job, chip_type=chip_type).exists():
            raise BidRefused(
                "chip",
                _("Job %(id)s already has an active bid for %(chip)s: raise or lower that one.")
                % {"id": job.pk, "chip": chip_type.slug},
            )
        if chip_type.pk in lapsed_chip_types(job):
            raise BidRefused(
                "chip",
                _(
                    "Job %(id)s's last bid for %(chip)s lapsed: it won chips the job did not take up in time. "
                    "The job can bid for them again once it has been placed."
                )
                % {"id": job.pk, "chip": chip_type.slug},
            )
        lock_credit(owner)  # after the job's row lock: rows first, then credit, everywhere
        _check_terms(owner, job, chip_type, chips, max_price_per_hour, now, replacing=None)
        bid = Bid.objects.create(
            owner=owner,
            job=job,
            chip_type=chip_type,
            chips=chips,
            max_price_per_hour=max_price_per_hour,
            placed_at=now,
        )
        request_clearing(chip_type.pk)
    return bid


def change_bid(bid: Bid, *, chips: int | None = None, max_price_per_hour: int | None = None, now=None) -> Bid:
    """Raise or lower a bid's price or chips; time priority is kept."""
    now = now or timezone.now()
    with transaction.atomic():
        bid = lock_bid(bid.pk)  # its job first, then the bid, then the owner's credit
        if bid.status != BidStatus.ACTIVE:
            raise BidRefused(
                "status",
                _("Bid %(id)s is %(status)s; it can't be changed.")
                % {"id": bid.pk, "status": bid.get_status_display().lower()},
            )
        chips = bid.chips if chips is None else chips
        price = bid.max_price_per_hour if max_price_per_hour is None else max_price_per_hour
        _check_usable(bid.job, bid.chip_type, chips)
        lock_credit(bid.owner)
        _check_terms(bid.owner, bid.job, bid.chip_type, chips, price, now, replacing=bid)
        bid.chips, bid.max_price_per_hour = chips, price
        bid.save(update_fields=["chips", "max_price_per_hour", "updated_at"])
        request_clearing(bid.chip_type_id)
    return bid


def cancel_bid(bid: Bid, now=None) -> Bid:
    """Withdraw a bid; a job holding spot chips under it is reclaimed at the next clearing (now).

    Chips it won that its job doesn't hold stop being kept (and billed) for it now.
    """
    now = now or timezone.now()
    with transaction.atomic():
        bid = lock_bid(bid.pk)  # its job first, then the bid
        if bid.status == BidStatus.CANCELLED:
            return bid
        if bid.status != BidStatus.ACTIVE:
            raise BidRefused(
                "status",
                _("Bid %(id)s is %(status)s; it can't be cancelled.")
                % {"id": bid.pk, "status": bid.get_status_display().lower()},
            )
        bid.status, bid.won_chips = BidStatus.CANCELLED, 0
        bid.save(update_fields=["status", "won_chips", "updated_at"])
        end_bid_reservations([bid.pk], now)
        request_clearing(bid.chip_type_id)
    return bid


def sync_job_bids(job: Job, chip_counts: dict[str, int], now) -> None:
    """A spot job's bids follow its placement: one per spot chip type it uses, at its bid price."""
    chips = {chip.slug: chip for chip in ChipType.objects.filter(slug__in=chip_counts)}
    active = {bid.chip_type.slug: bid for bid in lock_job_bids(job)}
    touched = set()
    for slug, count in chip_counts.items():
        bid = active.get(slug)
        if bid is None:
            bid = Bid.objects.create(
                owner=job.owner,
                job=job,
                chip_type=chips[slug],
                chips=count,
                max_price_per_hour=job.spot_bid_per_hour,
                placed_at=now,
            )
        elif bid.chips != count:
            bid.chips = count
            bid.save(update_fields=["chips", "updated_at"])
        touched.add(bid.chip_type_id)
    released = []
    for slug, bid in active.items():
        if slug not in chip_counts and bid.won_chips:
            bid.won_chips = 0  # a bid the placement doesn't use gives its chips back to the market
            bid.save(update_fields=["won_chips", "updated_at"])
            touched.add(bid.chip_type_id)
            released.append(bid.pk)
    end_bid_reservations(released, now)
    for chip_type_id in touched:
        request_clearing(chip_type_id)


def close_job_bids(job: Job, now=None) -> int:
    """The job ended: its bids close, and chips they won that it didn't hold stop being kept (and billed) for it."""
    now = now or timezone.now()
    # Locked by id before the update: an UPDATE locks rows in whatever order it finds them.
    bids = [bid.pk for bid in lock_job_bids(job)]
    closed = Bid.objects.filter(pk__in=bids).update(status=BidStatus.CLOSED, won_chips=0, updated_at=now)
    end_job_reservations(job, now)
    return closed


def bid_price_for(job: Job, chip_type_id: int) -> int | None:
    """What the job offers per chip-hour of this type: its bid for the type, else its general spot bid."""
    bid = Bid.objects.active().filter(job=job, chip_type_id=chip_type_id).first()
    return bid.max_price_per_hour if bid else job.spot_bid_per_hour


def lapsed_chip_types(job: Job) -> set[int]:
    """Chip types whose bid the job let lapse since it was last placed: no new bid for them until it is."""
    placed = Allocation.objects.filter(job=job).aggregate(at=Max("started_at"))["at"]
    lapsed = Bid.objects.filter(job=job, status=BidStatus.LAPSED)
    if placed is not None:
        lapsed = lapsed.filter(updated_at__gt=placed)
    return set(lapsed.values_list("chip_type_id", flat=True))


def cancelled_chip_types(job: Job) -> set[str]:
    """Chip types (slugs) whose last bid of the job was cancelled: the job stops renting them, and its
    re-plans neither bid for them again nor run on them on demand. A new bid for a type takes that back."""
    latest = Bid.objects.filter(job=job, chip_type=OuterRef("chip_type")).order_by("-pk").values("pk")[:1]
    cancelled = Bid.objects.filter(job=job, status=BidStatus.CANCELLED, pk=Subquery(latest))
    return set(cancelled.values_list("chip_type__slug", flat=True))


def _check_usable(job: Job, chip_type: ChipType, chips: int) -> None:
    """Refuse a bid its job could never use: it would win chips that nobody runs on."""
    usable = chip_limit(job, chip_type)
    if usable.limit == 0:
        raise BidRefused(usable.field, usable.reason)
    if job.chip_counts and chips > usable.limit:  # beyond the planner's cap, "chips that exist" says more
        raise BidRefused(
            "chips",
            _("Job %(id)s runs on %(limit)s %(chip)s chip(s) picked for it; %(asked)s asked.")
            % {"id": job.pk, "limit": usable.limit, "chip": chip_type.slug, "asked": chips},
        )


def _check_terms(owner, job: Job, chip_type: ChipType, chips: int, price: int, now, replacing: Bid | None) -> None:
    floor = floor_of(chip_type.pk, now)
    if floor is None:
        raise BidRefused("chip", _("%(chip)s has no price yet; it can't be bid on.") % {"chip": chip_type.slug})
    if price < floor:
        raise BidRefused(
            "max_price",
            _("%(price)s/h is below the %(chip)s spot floor of %(floor)s/h.")
            % {"price": format_amount(price), "chip": chip_type.slug, "floor": format_amount(floor)},
        )
    exist = Node.objects.filter(pool__chip_type=chip_type, spot_eligible=True).aggregate(n=Sum("chips"))["n"] or 0
    if chips > exist:
        raise BidRefused(
            "chips",
            _("%(asked)s chips asked, but the platform has %(exist)s spot-eligible %(chip)s chip(s).")
            % {"asked": chips, "exist": exist, "chip": chip_type.slug},
        )
    minutes = OperatorSettings.load().hold_minutes
    held = bid_hold(chips, price, minutes)
    # Everything the owner's other bids and queued jobs hold (read under lock_credit, so a concurrent
    # bid or launch of the same owner has either committed and is counted, or waits for this one).
    already = commitments(owner, exclude_bid_id=getattr(replacing, "pk", None))
    others = already.total()
    balance = balance_of(owner)
    if already.total(bid_for=job.pk, bid_hold=held) > balance:
        raise BidRefused(
            "balance",
            (
                _(
                    "Your balance of %(balance)s can't hold this bid: %(minutes)s minutes of %(chips)s chip(s) at "
                    "%(price)s/h is %(held)s, on top of %(others)s held by your other bids and queued jobs."
                )
                if others
                else _(
                    "Your balance of %(balance)s can't hold this bid: %(minutes)s minutes of %(chips)s chip(s) at "
                    "%(price)s/h is %(held)s."
                )
            )
            % {
                "balance": format_money(balance),
                "minutes": minutes,
                "chips": chips,
                "price": format_price(price),
                "held": format_money(held),
                "others": format_money(others),
            },
        )
