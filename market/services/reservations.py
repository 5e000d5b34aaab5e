"""Chips a bid has won that its job doesn't hold yet: kept for it, and billed from the moment they are won.

A clearing that gives a bid more chips than its job holds takes them from their last holders (with
notice) and keeps them for the bid's job until it is placed. That costs the winner from the win on,
whether or not its job ever runs on them, so a bid can't evict a rival for free:

- a clearing opens a `SpotReservation` at its time for a bid's untaken chips (won - held > 0); when
  that count changes it ends the open one and opens another, and when it drops to 0 (the chips went
  to someone else, or the job now holds them) it ends it;
- cancelling the bid, the job's end (its bids close), a lapse and the job's placement end it: the
  placement in its own transaction, at the moment its allocations start, so the reservation and
  the allocation never bill the same second;
- ending one charges it at once, in the same transaction (`billing.services.reservations`): the
  spot price in force each whole second, rounded once, as the meter charges a spot allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from billing.services.reservations import ReservedSpan, charge_reserved_spans
from fleet.models import Job
from market.models import Bid, SpotReservation
from market.services.locks import lock_job_bids
from market.signals import spot_chips_won


def sync_reservations(bids: list[Bid], holdings: dict[int, int], now: datetime) -> None:
    """After a clearing: each bid's open reservation covers exactly the chips it won that its job doesn't hold."""
    untaken = {bid.pk: max(0, bid.won_chips - holdings.get(bid.job_id, 0)) for bid in bids}
    current = {reservation.bid_id: reservation for reservation in _open(bid__in=untaken)}
    _end([reservation for bid_id, reservation in current.items() if reservation.chips != untaken[bid_id]], now)
    opened = SpotReservation.objects.bulk_create(
        [
            SpotReservation(
                bid=bid,
                job_id=bid.job_id,
                owner_id=bid.owner_id,
                chip_type_id=bid.chip_type_id,
                chips=untaken[bid.pk],
                started_at=now,
            )
            for bid in bids
            if untaken[bid.pk] and (bid.pk not in current or current[bid.pk].chips != untaken[bid.pk])
        ]
    )
    if opened:
        # The chips cost the job from now: it should be planned at the next pass, not after its backoff.
        # Announced after commit: a clearing holds the bids' locks, and a job's cancel locks the job, then
        # its bids. Only a hint: the job's backoff (a minute at most) brings it back anyway.
        waiting = sorted({reservation.job_id for reservation in opened})
        transaction.on_commit(lambda: spot_chips_won.send(sender=SpotReservation, job_ids=waiting, now=now))


def end_bid_reservations(bid_ids: Iterable[int], now: datetime) -> list[SpotReservation]:
    """The bids stopped winning or were cancelled, closed or lapsed: end and charge their reservations."""
    return _end(list(_open(bid__in=list(bid_ids))), now)


def end_job_reservations(job: Job, now: datetime) -> list[SpotReservation]:
    """The job is placed or ended: end and charge every reservation of its bids.

    Its active bids are locked first (after the job, by id: market.services.locks), as a clearing
    locks them before reading what jobs hold: a clearing racing a placement either runs after it
    (and sees its allocations) or before it commits (and what it reserves meanwhile is ended here),
    never reserving chips the job holds.
    """
    lock_job_bids(job)
    return _end(list(_open(job=job)), now)


def _open(**where):
    # Locked: of two transactions ending the same reservation (a clearing and a cancel), the second
    # waits, then re-reads it as ended and leaves it alone, so a span is charged once.
    return (
        SpotReservation.objects.select_for_update(of=("self",))
        .filter(ended_at__isnull=True, **where)
        .select_related("chip_type")
        .order_by("pk")
    )


def _end(reservations: list[SpotReservation], now: datetime) -> list[SpotReservation]:
    """End the reservations at `now` and charge each for its span, in the caller's transaction."""
    if not reservations:
        return []
    for reservation in reservations:
        reservation.ended_at = max(now, reservation.started_at)
    charges = charge_reserved_spans([_span(reservation) for reservation in reservations], now)
    for reservation, charge in zip(reservations, charges, strict=True):
        reservation.owed, reservation.amount, reservation.transaction = charge.owed, charge.charged, charge.transaction
    SpotReservation.objects.bulk_update(reservations, ["ended_at", "owed", "amount", "transaction"])
    return reservations


def _span(reservation: SpotReservation) -> ReservedSpan:
    return ReservedSpan(
        key=f"reservation:{reservation.pk}",
        owner_id=reservation.owner_id,
        chip_type_id=reservation.chip_type_id,
        chips=reservation.chips,
        started_at=reservation.started_at,
        ended_at=reservation.ended_at,
        label=f"bid {reservation.bid_id} of job {reservation.job_id} ({reservation.chip_type.slug})",
    )
