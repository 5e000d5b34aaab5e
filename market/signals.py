"""What the spot market announces; the market decides, the compute side acts.

`spot_chips_won` is sent after a clearing commits that kept chips for waiting jobs' bids: those
jobs pay for the chips from now, so they are worth planning at once (a hint; their backoff brings
them back within a minute anyway).

`spot_chips_lost` is sent after a clearing commits that took spot chips away from jobs holding them
(a higher bid, on-demand work, a cancelled bid): each such job must get notice and move. Whoever
acts on it (workers.receivers) may die with its process before it does; nothing is lost then, since
the next clearing (every few seconds) finds the same jobs still holding chips their bids didn't win
and announces them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.dispatch import Signal

from base.stored_text import StoredText


@dataclass(frozen=True)
class SpotLoss:
    """Chips of one type a job holds but may keep no longer, and why (for its owner)."""

    job_id: int
    chips: int
    reason: str  # a workers MigrationReason value
    detail: str | StoredText


# Keyword arguments: chip_type_id (int), losses (list[SpotLoss]), notice_seconds (int), now (datetime).
spot_chips_lost = Signal()

# Keyword arguments: job_ids (list[int]), now (datetime).
spot_chips_won = Signal()


@dataclass(frozen=True)
class MoveDestination:
    """Where a job moved off its spot chips would be re-planned now, as the compute side sees it.

    `chips`: "1 × TPU v5e (on-demand)", empty when nothing would be free (then `reason` says why);
    `cost_ratio`: its cost per token against the job's current plan (None when unknown).
    """

    chips: str
    price_per_hour: int | None = None
    cost_ratio: float | None = None
    reason: str = ""


# Sent (not after a commit: it asks, nothing changes) before a bid change that would move a running job.
# Keyword arguments: job (Job), chip_type (ChipType), bid_price (int: the job's bid for that type after
# the change; None: the bid is withdrawn), spot_price (int: that type's clearing price after it), reserved
# (int: chips of that type the change lets other waiting bids win, kept for them).
# A receiver returns a MoveDestination, or None when it can't tell.
bid_move_preview = Signal()
