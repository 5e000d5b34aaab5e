"""What an owner's credit already holds: active bids and jobs waiting to be placed.

Every credit decision (placing or changing a bid, launching a job, placing a job) counts these
against the balance, under `billing.services.holds.lock_credit`, so that N concurrent requests
never commit more than the balance covers. A queued spot job may hold both its launch hold and
bids for the same chips; it holds the larger of the two, not their sum.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from billing.models import OperatorSettings
from billing.services.holds import hold_needed
from fleet.choices import JobStatus
from fleet.models import Job
from market.models import Bid

WAITING = (JobStatus.QUEUED, JobStatus.PLANNING)


def bid_hold(chips: int, price_per_hour: int, minutes: int) -> int:
    """A bid holds `minutes` of all its chips at its price (the launch hold's rule, billing's)."""
    return hold_needed(chips * price_per_hour, minutes)


@dataclass(frozen=True)
class Commitments:
    """Per job: the credit its launch holds while it waits, and what its active bids hold."""

    queued: dict[int, int]
    bids: dict[int, int]

    def total(self, *, without_job: int | None = None, bid_for: int | None = None, bid_hold: int = 0) -> int:
        """All of it, less one job (being placed), plus one more bid (being placed or changed)."""
        bids = dict(self.bids)
        if bid_for is not None:
            bids[bid_for] = bids.get(bid_for, 0) + bid_hold
        jobs = (set(self.queued) | set(bids)) - {without_job}
        return sum(max(self.queued.get(job, 0), bids.get(job, 0)) for job in jobs)


def commitments(owner, *, exclude_bid_id: int | None = None) -> Commitments:
    """What `owner` holds now; `exclude_bid_id`: a bid being changed, counted at its new terms by the caller."""
    minutes = OperatorSettings.load().hold_minutes
    bids: dict[int, int] = defaultdict(int)
    rows = Bid.objects.active().filter(owner=owner).exclude(pk=exclude_bid_id)
    for job_id, chips, price in rows.values_list("job_id", "chips", "max_price_per_hour"):
        bids[job_id] += bid_hold(chips, price, minutes)
    queued = dict(Job.objects.filter(owner=owner, status__in=WAITING).values_list("pk", "credit_hold"))
    return Commitments(queued=queued, bids=dict(bids))
