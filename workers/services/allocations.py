"""The chips a job holds: ending allocations (billing stops there) and letting held chips go.

Every way chips stop being a job's goes through here, so that billing's final charge runs at the
end and waiting jobs are woken to plan on the freed chips.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from billing.services.meter import charge_allocations
from fleet.models import Allocation, Job, Node
from workers.services.queue import wake_waiting_jobs


def release(job: Job, now: datetime | None = None) -> int:
    """End the job's open allocations now (the final charge, through the last whole second)."""
    now = now or timezone.now()
    ending = list(Allocation.objects.open().filter(job=job).values_list("pk", flat=True))
    Allocation.objects.filter(pk__in=ending).update(ended_at=now)
    charge_allocations(ending, now)
    if ending:
        wake_waiting_jobs(now)  # chips are free: waiting jobs are worth planning again
    return len(ending)


def end_for_notice(allocations: list[Allocation], now: datetime, hold_seconds: int | None) -> None:
    """Billing of these chips stops now; they stay held `hold_seconds` (None: let go at once) while the
    job's ranks checkpoint and leave."""
    hold = None if hold_seconds is None else now + timedelta(seconds=hold_seconds)
    ending = [a.pk for a in allocations]
    Allocation.objects.filter(pk__in=ending).update(ended_at=now, held_until=hold)
    charge_allocations(ending, now)


def let_go_held(job: Job, now: datetime) -> int:
    """Chips the job's leaving ranks still held are free from now."""
    freed = Allocation.objects.filter(job=job, held_until__gt=now).update(held_until=now)
    if freed:
        wake_waiting_jobs(now)
    return freed


def release_leaving_chips(job: Job, epoch: int, node: Node, now: datetime) -> int:
    """A node reported that a rank of an older placement exited: its chips there are free again."""
    freed = Allocation.objects.filter(job=job, epoch=epoch, node=node, held_until__gt=now).update(held_until=now)
    if freed:
        wake_waiting_jobs(now)
    return freed
