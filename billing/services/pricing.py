"""What a chip-hour costs: list prices, the spot price history, and the rules that combine them.

- The on-demand price and the spot floor are versioned rows (`Price`); the spot market records each
  clearing that changed its market (`SpotPrice`). The spot price in force is the clearing price,
  never below the floor in force (`spot_price`, the one home of that rule); before the first
  clearing, the floor.
- `PriceBook` answers what a chip-hour cost at any moment and over any span, exactly: the meter,
  reservations, holds and training insurance all price time through it.
- `current_offers` is what each chip type costs now, with the price of a unit of work (an RTX
  4090-hour of delivered bf16 compute) for the pricing page.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from billing.models import Price, SpotPrice
from fleet.choices import AgentStatus, AllocationMode
from fleet.models import REFERENCE_CHIP, Allocation, ChipType
from kernel.money import MICROSECOND, round_micros


def spot_price(floor: int, clearing: int | None) -> int:
    """The spot price in force: the auction's clearing price, never below the floor in force."""
    return floor if clearing is None else max(floor, clearing)


@dataclass(frozen=True)
class ChipOffer:
    """What one chip type costs now, what a 4090-equivalent hour of its compute costs, and its chips.

    Only chips whose node's agent is online count as capacity (they can be rented); chips declared
    in a pool whose node has no agent online are `offline` and shown as such, never as capacity.
    """

    chip: ChipType
    price: Price | None
    capacity: int  # chips online: enrolled, agent heartbeating, not draining
    simulated_capacity: int  # of those, simulated
    spot_clearing: int | None = None  # the spot auction's last clearing price, if it has cleared
    spot_capacity: int = 0  # online and spot-eligible
    free: int = 0  # online and not held by a job now
    offline: int = 0  # declared in a pool, but no agent online for them

    @property
    def on_demand_per_hour(self) -> int | None:
        return self.price.on_demand_per_hour if self.price else None

    @property
    def spot_per_hour(self) -> int | None:
        """The spot price now: the auction's clearing price, never below the floor in force."""
        if not self.price:
            return None
        return spot_price(self.price.spot_floor_per_hour, self.spot_clearing)

    def speedup(self, reference: ChipType) -> Decimal:
        """Delivered bf16 compute relative to the reference chip (an RTX 4090)."""
        return self.chip.delivered_tflops / reference.delivered_tflops

    def per_work_unit(self, per_hour: int | None, reference: ChipType) -> int | None:
        if per_hour is None:
            return None
        return round_micros(Decimal(per_hour) / self.speedup(reference))


def current_offers(now=None) -> list[ChipOffer]:
    """Every chip type with its price in force at `now` and its chips online, free and offline."""
    now = now or timezone.now()
    prices = {price.chip_type_id: price for price in Price.objects.in_force(now)}
    clearing = latest_spot_prices(now)
    held = _held_chips(now)
    offers = []
    for chip in ChipType.objects.prefetch_related("pools__nodes"):
        nodes = [node for pool in chip.pools.all() for node in pool.nodes.all()]
        online = [node for node in nodes if node.agent_status == AgentStatus.ONLINE]
        offers.append(
            ChipOffer(
                chip=chip,
                price=prices.get(chip.pk),
                capacity=sum(node.chips for node in online),
                simulated_capacity=sum(node.chips for node in online if node.simulated),
                spot_clearing=clearing[chip.pk].price_per_hour if chip.pk in clearing else None,
                spot_capacity=sum(node.chips for node in online if node.spot_eligible),
                free=sum(max(node.chips - held.get(node.pk, 0), 0) for node in online),
                offline=sum(node.chips for node in nodes if node.agent_status != AgentStatus.ONLINE),
            )
        )
    return offers


def _held_chips(now) -> dict[int, int]:
    """Chips held per node now: open allocations, and reclaimed ones still inside their notice."""
    rows = Allocation.objects.holding(now).values("node_id").annotate(used=Sum("chips")).order_by()
    return {row["node_id"]: row["used"] for row in rows}


def reference_chip(offers: list[ChipOffer]) -> ChipType:
    return next((offer.chip for offer in offers if offer.chip.slug == REFERENCE_CHIP), offers[0].chip)


# Price history --------------------------------------------------------------------------------


class PriceBook:
    """Price history per chip type, answering "what did a chip-hour cost at t" and over a span.

    On-demand allocations pay the on-demand price in force. Spot allocations pay the spot market's
    clearing price in force (`SpotPrice`, one row per clearing that changed the market), never
    below the spot floor in force (`spot_price`); before the first clearing, the floor.
    """

    def __init__(self, rows: list[tuple[int, datetime, int, int]], spot_rows: list[tuple[int, datetime, int]] = ()):
        self._times: dict[int, list[datetime]] = defaultdict(list)
        self._prices: dict[int, list[tuple[int, int]]] = defaultdict(list)
        # One timeline per chip type: every moment the list price or the clearing price changed.
        changes: dict[int, list[tuple[datetime, int, tuple]]] = defaultdict(list)
        for chip_type_id, effective_at, on_demand, spot_floor in rows:
            changes[chip_type_id].append((effective_at, 0, (on_demand, spot_floor)))
        for chip_type_id, at, clearing in spot_rows:
            changes[chip_type_id].append((at, 1, (clearing,)))
        for chip_type_id, timeline in changes.items():
            listed, clearing = None, None
            for at, kind, values in sorted(timeline, key=lambda change: (change[0], change[1])):
                if kind == 0:
                    listed = values
                else:
                    clearing = values[0]
                if listed is None:
                    continue
                on_demand, floor = listed
                price = (on_demand, spot_price(floor, clearing))
                times = self._times[chip_type_id]
                if times and times[-1] == at:
                    self._prices[chip_type_id][-1] = price
                else:
                    times.append(at)
                    self._prices[chip_type_id].append(price)

    @classmethod
    def load(cls, chip_type_ids=None) -> PriceBook:
        prices = Price.objects.order_by("chip_type_id", "effective_at", "id")
        spot = SpotPrice.objects.order_by("chip_type_id", "at", "id")
        if chip_type_ids is not None:
            prices = prices.filter(chip_type_id__in=chip_type_ids)
            spot = spot.filter(chip_type_id__in=chip_type_ids)
        return cls(
            list(prices.values_list("chip_type_id", "effective_at", "on_demand_per_hour", "spot_floor_per_hour")),
            list(spot.values_list("chip_type_id", "at", "price_per_hour")),
        )

    def price_per_hour(self, chip_type_id: int, mode: str, at: datetime) -> int | None:
        """Micro-units per chip-hour in force at `at` (None before the first price)."""
        index = bisect.bisect_right(self._times[chip_type_id], at) - 1
        return None if index < 0 else self._column(self._prices[chip_type_id][index], mode)

    def segments(
        self, chip_type_id: int, mode: str, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime, int]]:
        """[(from, to, per_hour)] covering [start, end); spans without a price are left out (free)."""
        times, prices = self._times[chip_type_id], self._prices[chip_type_id]
        first = max(bisect.bisect_right(times, start) - 1, 0)
        spans = []
        for index in range(first, len(times)):
            lo = max(start, times[index])
            hi = min(end, times[index + 1]) if index + 1 < len(times) else end
            if lo >= end:
                break
            if hi > lo:
                spans.append((lo, hi, self._column(prices[index], mode)))
        return spans

    def integral(self, chip_type_id: int, mode: str, start: datetime, end: datetime) -> int:
        """Σ per_hour x microseconds over [start, end): exact, in micro-unit-microseconds per hour."""
        return sum(
            per_hour * ((hi - lo) // MICROSECOND) for lo, hi, per_hour in self.segments(chip_type_id, mode, start, end)
        )

    @staticmethod
    def _column(price: tuple[int, int], mode: str) -> int:
        on_demand, spot = price
        return spot if mode == AllocationMode.SPOT else on_demand


def price_per_hour(chip_type_id: int, mode: str, at: datetime) -> int | None:
    """What one chip of this type costs per hour at `at`, in micro-units."""
    return PriceBook.load([chip_type_id]).price_per_hour(chip_type_id, mode, at)


def latest_spot_prices(now: datetime | None = None) -> dict[int, SpotPrice]:
    """The last clearing of every chip type (at or before `now`)."""
    rows = SpotPrice.objects.order_by("chip_type_id", "-at", "-id").distinct("chip_type_id")
    if now is not None:
        rows = rows.filter(at__lte=now)
    return {row.chip_type_id: row for row in rows}


def record_spot_price(
    chip_type_id: int, at: datetime, *, price: int, floor: int, capacity: int, demand: int, allocated: int
) -> None:
    """Keep a clearing's result when its price or its market changed since the last one kept."""
    last = SpotPrice.objects.filter(chip_type_id=chip_type_id).order_by("-at", "-id").first()
    state = (price, floor, capacity, demand, allocated)
    if last and (last.price_per_hour, last.floor_per_hour, last.capacity, last.demand, last.allocated) == state:
        return
    SpotPrice.objects.create(
        chip_type_id=chip_type_id,
        at=at,
        price_per_hour=price,
        floor_per_hour=floor,
        capacity=capacity,
        demand=demand,
        allocated=allocated,
    )
