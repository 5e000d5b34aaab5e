"""Metering in tests: a fixed start, credit straight through the ledger, open allocations, prices in force,
and what a span costs exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

from billing.models import Price
from billing.services.credits import adjust_credit
from fleet.choices import AllocationMode
from fleet.models import Allocation

T0 = datetime(2031, 1, 1, tzinfo=UTC)


FOUR_CHIPS_PER_HOUR = 4 * 1_200_000


def fund(user, amount: int = 10**12, key: str = "fund") -> None:
    adjust_credit(user, amount, reason="test funds", actor=None, key=f"{key}:{user.pk}")


def open_allocation(job, node, start=T0, chips=4, mode=AllocationMode.ON_DEMAND, ended_at=None) -> Allocation:
    return Allocation.objects.create(
        job=job,
        node=node,
        chip_type=node.pool.chip_type,
        chips=chips,
        mode=mode,
        epoch=1,
        started_at=start,
        ended_at=ended_at,
        billed_through=start,
    )


def set_price(chip_type, at, on_demand, spot_floor=None) -> None:
    Price.objects.create(
        chip_type=chip_type,
        on_demand_per_hour=on_demand,
        spot_floor_per_hour=spot_floor or on_demand // 2,
        effective_at=at,
    )


def exact_cost(allocation: Allocation, end: datetime) -> int:
    """The oracle: the price rows integrated with Fractions, rounded half up once."""
    rows = sorted(
        Price.objects.filter(chip_type=allocation.chip_type).values_list(
            "effective_at", "id", "on_demand_per_hour", "spot_floor_per_hour"
        )
    )
    total = Fraction(0)
    for i, (at, _, on_demand, spot) in enumerate(rows):
        nxt = rows[i + 1][0] if i + 1 < len(rows) else end
        lo, hi = max(at, allocation.started_at), min(nxt, end)
        if hi > lo:
            per_hour = spot if allocation.mode == AllocationMode.SPOT else on_demand
            total += Fraction(per_hour * allocation.chips) * Fraction(
                (hi - lo) // timedelta(microseconds=1), 3_600_000_000
            )
    whole, rest = divmod(total.numerator, total.denominator)
    return whole + (1 if 2 * rest >= total.denominator else 0)
