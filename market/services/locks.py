"""The one lock order of placement, the market and a job's end (docs/ARCHITECTURE.md, "Locks").

A transaction that locks more than one of these takes them in this order, rows of one kind by id:

1. a chip type's spot market (an advisory lock; only that type's clearing takes it);
2. jobs;
3. their bids;
4. nodes (placement);
5. the owner's credit (an advisory lock, `billing.services.holds.lock_credit`);
6. spot reservations;
7. ledger accounts (`billing.services.ledger.lock_wallets`).

The deadlock it prevents (#28, a two-user spot run): a placement held its job and waited for the
job's bids, while a clearing held the bids and, writing a reservation for the job's won chips,
waited for the job's row (inserting a row that references a job takes a key-share lock on it).
Now a clearing locks its bidders' jobs first, and every transaction that locks a job's bids holds
the job before them.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from fleet.models import Job
from market.models import Bid

# FOR KEY SHARE: the clearing only needs its bidders' jobs to stay while it writes rows referencing
# them. It waits for a job's FOR UPDATE holder (a placement, a lifecycle transition), but not for
# plain updates of a job's progress (reports).
JOBS_KEY_SHARE = f"SELECT id FROM {Job._meta.db_table} WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE"


def lock_jobs_shared(job_ids: Iterable[int]) -> list[int]:
    """Key-share lock these jobs, by id; the ids that exist. Call inside a transaction."""
    ids = sorted(set(job_ids))
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(JOBS_KEY_SHARE, [ids])
        return [row[0] for row in cursor.fetchall()]


def lock_job_bids(job: Job) -> list[Bid]:
    """Lock the job (again, if the caller holds it already: free), then its active bids by id."""
    Job.objects.select_for_update().filter(pk=job.pk).values_list("pk", flat=True).first()
    bids = Bid.objects.active().filter(job_id=job.pk).select_related("chip_type").select_for_update(of=("self",))
    return list(bids.order_by("pk"))


def lock_bid(bid_id: int) -> Bid:
    """One bid, locked after its job (a bid's job never changes, so reading it unlocked first is safe)."""
    job_id = Bid.objects.values_list("job_id", flat=True).get(pk=bid_id)
    Job.objects.select_for_update().filter(pk=job_id).values_list("pk", flat=True).first()
    return Bid.objects.select_for_update(of=("self",)).select_related("chip_type", "job").get(pk=bid_id)


def lock_chip_type_bids(chip_type_id: int) -> list[Bid]:
    """A clearing's bids: the active bids of the chip type, locked after their jobs, both by id.

    A bid placed after its job was read here is left for the next clearing (its placement asked
    for one when it committed)."""
    active = Bid.objects.active().filter(chip_type_id=chip_type_id)
    jobs = lock_jobs_shared(active.values_list("job_id", flat=True))
    locked = active.filter(job_id__in=jobs).select_related("job").select_for_update(of=("self",))
    return list(locked.order_by("pk"))
