"""Whether a bid change or cancellation would move its running job, and where to: asked before it is made.

A job holding spot chips under a bid loses them when the bid is cancelled, lowered below the price
that clears, or cut to fewer chips than it holds; losing any chip moves the whole job (every rank
checkpoints and the job is re-planned). So the pages and the API ask first: this module re-runs the
chip type's auction with the bid as it would be (the same inputs `clearing.clear_chip_type` uses,
nothing written) and says how many chips the job would lose.

Where the job would go is the compute side's answer (the market never plans): it is asked through the
`bid_move_preview` signal, whose receiver re-plans the job as it would be after the change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.translation import gettext as _

from kernel.money import format_money
from market import auction
from market.models import Bid, BidStatus
from market.services.demand import demand_of
from market.services.market_state import floor_of, spot_capacity, spot_holdings
from market.signals import MoveDestination, bid_move_preview


class MoveNotConfirmed(Exception):
    """A change that would move a running job, made without saying it is meant (`confirm`)."""

    def __init__(self, move: JobMove):
        super().__init__(move.message)
        self.move = move


@dataclass(frozen=True)
class JobMove:
    """What a bid change would do to its running job: chips lost, and where the job would go."""

    bid: Bid
    chips_lost: int
    chips_held: int
    price_after: int  # the clearing price the change would leave
    price_per_hour_now: int | None  # what the job's placement costs per hour now (its plan's estimate)
    destination: MoveDestination | None
    cancel: bool

    @property
    def job_id(self) -> int:
        return self.bid.job_id

    @property
    def message(self) -> str:
        chip = self.bid.chip_type.name
        if self.cancel:
            action = _("Cancelling bid %(bid)s") % {"bid": self.bid.pk}
        else:
            action = _("This change to bid %(bid)s") % {"bid": self.bid.pk}
        if self.chips_lost >= self.chips_held:
            lost = _("all %(held)s of its %(chip)s spot chips") % {"held": self.chips_held, "chip": chip}
        else:
            lost = _("%(lost)s of its %(held)s %(chip)s spot chips") % {
                "lost": self.chips_lost,
                "held": self.chips_held,
                "chip": chip,
            }
        now = (
            _(" (now %(price)s/h)") % {"price": format_money(self.price_per_hour_now)}
            if self.price_per_hour_now
            else ""
        )
        text = _("%(action)s moves job %(job)s%(now)s: it loses %(lost)s, checkpoints and is re-planned") % {
            "action": action,
            "job": self.job_id,
            "now": now,
            "lost": lost,
        }
        if self.cancel:  # the job stops renting the type: the re-plan neither bids for it nor runs there on demand
            text += _(" without %(chip)s chips (a new bid for them takes that back)") % {"chip": chip}
        if self.destination is None:
            return text + _(" on whatever chips are free then.")
        if not self.destination.chips:
            return text + _("; no chips would be free for it now, so it would wait: %(reason)s") % {
                "reason": self.destination.reason
            }
        return text + _(", to %(chips)s at about %(price)s/h%(per_token)s.") % {
            "chips": self.destination.chips,
            "price": format_money(self.destination.price_per_hour),
            "per_token": self._per_token(),
        }

    def _per_token(self) -> str:
        ratio = self.destination.cost_ratio if self.destination else None
        if ratio is None or abs(ratio - 1) < 0.05:
            return ""
        if ratio > 1:
            return _(" (%(ratio)s× the cost per token)") % {"ratio": f"{ratio:.1f}"}
        return _(" (%(ratio)s× cheaper per token)") % {"ratio": f"{1 / ratio:.1f}"}

    def as_dict(self) -> dict:
        """For the API's 409: the consequence, in words and in numbers."""
        destination = self.destination
        return {
            "bid": self.bid.pk,
            "job": self.job_id,
            "chip": self.bid.chip_type.slug,
            "chips_lost": self.chips_lost,
            "chips_held": self.chips_held,
            "to": destination.chips if destination else None,
            "price_per_hour_now": self.price_per_hour_now,
            "price_per_hour_after": destination.price_per_hour if destination and destination.chips else None,
        }


def move_of_change(
    bid: Bid, *, chips: int | None = None, max_price_per_hour: int | None = None, now: datetime | None = None
) -> JobMove | None:
    """The move raising or lowering `bid` would cause, or None when its job keeps every chip."""
    if bid.status != BidStatus.ACTIVE:
        return None
    chips = bid.chips if chips is None else chips
    price = bid.max_price_per_hour if max_price_per_hour is None else max_price_per_hour
    return _move(bid, chips=chips, price=price, now=now or timezone.now())


def move_of_cancel(bid: Bid, now: datetime | None = None) -> JobMove | None:
    """The move cancelling `bid` would cause, or None when its job holds no chip under it."""
    if bid.status != BidStatus.ACTIVE:
        return None
    return _move(bid, chips=0, price=0, now=now or timezone.now())


def _move(bid: Bid, *, chips: int, price: int, now: datetime) -> JobMove | None:
    holdings = spot_holdings(bid.chip_type_id)
    held = holdings.get(bid.job_id, 0)
    if not held:
        return None
    result = preview_clearing(bid, chips=chips, price=price, now=now)
    if result is None:
        return None
    lost = held - result.chips_won(bid.pk)
    if lost <= 0:
        return None
    job = bid.job
    # Chips the change lets other waiting bids win: kept for them, so the moved job can't plan on them.
    others = Bid.objects.active().filter(chip_type_id=bid.chip_type_id).exclude(pk=bid.pk)
    reserved = sum(
        max(0, result.chips_won(other.pk) - holdings.get(other.job_id, 0)) for other in others.only("pk", "job_id")
    )
    answers = bid_move_preview.send(
        sender=Bid,
        job=job,
        chip_type=bid.chip_type,
        bid_price=price if chips else None,
        spot_price=result.price,
        reserved=reserved,
    )
    destination = next((answer for _receiver, answer in answers if answer is not None), None)
    plan = job.plan
    return JobMove(
        bid=bid,
        chips_lost=lost,
        chips_held=held,
        price_after=result.price,
        price_per_hour_now=plan.price_per_hour if plan else None,
        destination=destination,
        cancel=chips == 0,
    )


def preview_clearing(bid: Bid, *, chips: int, price: int, now: datetime) -> auction.Clearing | None:
    """The chip type's auction as it would clear with `bid` at `chips` × `price` (0 chips: withdrawn)."""
    chip = bid.chip_type
    floor = floor_of(chip.pk, now)
    if floor is None:
        return None
    holdings = spot_holdings(chip.pk)
    entries = []
    for other in Bid.objects.active().filter(chip_type=chip).select_related("job"):
        asks, offer = (chips, price) if other.pk == bid.pk else (other.chips, other.max_price_per_hour)
        if not asks:
            continue
        demand = demand_of(asks, other.job, chip, holdings.get(other.job_id, 0))
        if demand > 0:
            entries.append(auction.Bid(id=other.pk, price=offer, chips=demand, placed_at=other.placed_at.timestamp()))
    return auction.clear(entries, capacity=spot_capacity(chip.pk, now), floor=floor)
