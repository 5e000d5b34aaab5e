"""How the compute side acts on what billing, the market and the job lifecycle announce.

Billing and the market decide and report (signals sent after their transactions commit); the
lifecycle carries out the stops and moves. None of these signals has to arrive: each is re-derived
by a periodic pass (the reconciler's credit check, the next spot clearing, the planning pass), so a
process that dies between a commit and its reaction delays the reaction by one pass, no more.
"""

from __future__ import annotations

from django.dispatch import receiver

from billing.signals import credit_shortfall
from market.signals import SpotLoss, bid_move_preview, spot_chips_lost, spot_chips_won
from workers.services import lifecycle, move_preview, queue, scheduling


@receiver(credit_shortfall, dispatch_uid="workers.stop_jobs_short_of_credit")
def stop_job_short_of_credit(sender, *, job_id: int, reason: str, data: dict, now, **kwargs) -> None:
    """The meter could not charge the job in full: checkpoint and stop it now."""
    lifecycle.stop_for_credit(job_id, reason, data=data, now=now)


@receiver(spot_chips_lost, dispatch_uid="workers.move_jobs_off_lost_spot_chips")
def move_jobs_off_lost_spot_chips(
    sender, *, chip_type_id: int, losses: list[SpotLoss], notice_seconds: int, now, **kwargs
) -> None:
    """A clearing took spot chips from running jobs: each gets notice and moves elsewhere."""
    for loss in losses:
        lifecycle.reclaim(
            loss.job_id, loss.reason, loss.detail, chip_type_id=chip_type_id, notice_seconds=notice_seconds, now=now
        )


@receiver(bid_move_preview, dispatch_uid="workers.preview_bid_move")
def preview_bid_move(sender, *, job, chip_type, bid_price, spot_price, reserved, **kwargs):
    """A bid change would take a running job's chips: say where the job would be re-planned now."""
    return move_preview.preview_move(job, chip_type, bid_price, spot_price, reserved)


@receiver(spot_chips_won, dispatch_uid="workers.plan_jobs_holding_won_chips")
def plan_jobs_holding_won_chips(sender, *, job_ids: list[int], now, **kwargs) -> None:
    """Their bids won chips they pay for from now: plan them at the next pass, whatever their backoff."""
    queue.plan_at_next_pass(job_ids, now)


@receiver(lifecycle.job_queued, dispatch_uid="workers.plan_queued_jobs")
def plan_queued_job(sender, *, job_id: int, **kwargs) -> None:
    """A job entered the queue: plan it now rather than at the next planning pass."""
    scheduling.plan_soon(job_id)
