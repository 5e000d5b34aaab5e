"""A day of spot demand replayed against the real auction code, for operators.

Pure Python, no Django: `simulate_market` loads the catalog and prints; everything here can be
driven by hand-made steps in tests. Each step, bids arrive and leave, on-demand allocations take
some spot-eligible chips, and `market.auction.clear` runs on what remains. A bid that held chips
and is awarded fewer in the next round was reclaimed (a bid that leaves on its own was not).
An optional job bids like any other and pays the clearing price for the chips it wins each step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from kernel.money import cost_of_integral
from market.auction import Bid, clear, displaced

HOUR = 3600
MICROSECONDS_PER_SECOND = 1_000_000
CENT = 10_000  # bids are placed in whole ¥0.01
JOB_BID_ID = 0  # generated bids are numbered from 1

# The generated market: spot demand swings between these multiples of spot capacity over a day,
# lowest at 04:00 and highest at 16:00; on-demand takes up to a quarter of the spot-eligible
# chips at the peak. Bid sizes and lifetimes are plausible guesses, not measurements.
DEMAND_LOW, DEMAND_HIGH = 0.5, 1.6
ON_DEMAND_SHARE = 0.25
BID_CHIPS = (1, 1, 2, 2, 4, 8)
ON_DEMAND_CHIPS = (1, 2, 4, 8)
BID_HOURS, ON_DEMAND_HOURS = 3.0, 2.0


@dataclass(frozen=True)
class ChipMarket:
    """One chip type's spot market: spot-eligible chips and prices per chip-hour (micro-units)."""

    slug: str
    capacity: int
    floor: int
    on_demand: int


@dataclass(frozen=True)
class SpotJob:
    """A job that wants `chips` chips for `hours` and bids `bid` per chip-hour for them."""

    chips: int
    hours: float
    bid: int

    @property
    def chip_seconds(self) -> int:
        return round(self.chips * self.hours * HOUR)

    def on_demand_cost(self, on_demand: int) -> int:
        """The whole job on demand: every chip-hour at the on-demand price."""
        return _per_hour(on_demand * self.chip_seconds)


@dataclass(frozen=True)
class Step:
    """What changes before one round: bids that leave, bids that arrive, on-demand chips held."""

    arrivals: tuple[Bid, ...] = ()
    departures: tuple[int, ...] = ()
    on_demand: int = 0


@dataclass(frozen=True)
class Round:
    """One clearing: when (seconds from the start), at what price, and who lost chips."""

    at: int
    price: int
    demand: int
    capacity: int
    allocated: int
    reclaims: int
    reclaimed_chips: int


@dataclass(frozen=True)
class HourRow:
    """A simulated hour: mean and highest clearing price, mean demand, capacity and allocation."""

    hour: int
    price: int
    max_price: int
    demand: float
    capacity: float
    allocated: float
    reclaims: int
    reclaimed_chips: int


@dataclass
class JobOutcome:
    """What the job got on spot, and what the same chip-hours cost on demand."""

    job: SpotJob
    chip_seconds: int = 0
    cost_chip_seconds: int = 0  # sum of price x chip-seconds; / 3600 is micro-units
    interruptions: int = 0
    waiting_seconds: int = 0
    finished_at: int | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def spot_cost(self) -> int:
        return _per_hour(self.cost_chip_seconds)

    def on_demand_cost(self, on_demand: int) -> int:
        """On-demand price of the chip-hours the job actually ran on spot."""
        return _per_hour(on_demand * self.chip_seconds)


@dataclass
class MarketRun:
    """Every round of one chip type's simulated day, and the job's outcome if one was given."""

    market: ChipMarket
    step_seconds: int
    rounds: list[Round] = field(default_factory=list)
    job: JobOutcome | None = None

    @property
    def reclaims(self) -> int:
        return sum(r.reclaims for r in self.rounds)

    @property
    def reclaimed_chips(self) -> int:
        return sum(r.reclaimed_chips for r in self.rounds)

    def hourly(self) -> list[HourRow]:
        by_hour: dict[int, list[Round]] = {}
        for one in self.rounds:
            by_hour.setdefault(one.at // HOUR, []).append(one)
        return [_hour_row(hour, rounds) for hour, rounds in by_hour.items()]


def simulate(
    markets: Iterable[ChipMarket],
    *,
    seed: int,
    hours: int = 24,
    step_seconds: int = 60,
    job: SpotJob | None = None,
) -> list[MarketRun]:
    """Generate each chip type's day from the seed and replay it; the same seed gives the same day."""
    runs = []
    for market in markets:
        steps = generate_steps(market, seed=seed, hours=hours, step_seconds=step_seconds)
        runs.append(replay(market, steps, step_seconds=step_seconds, job=job))
    return runs


def replay(market: ChipMarket, steps: Iterable[Step], *, step_seconds: int, job: SpotJob | None = None) -> MarketRun:
    """Clear the auction once per step and count reclaims; the job (if any) bids from the start."""
    if step_seconds < 1:
        raise ValueError("A step must last at least one second.")
    run = MarketRun(market=market, step_seconds=step_seconds, job=JobOutcome(job) if job else None)
    active: dict[int, Bid] = {}
    holding: dict[int, int] = {}
    if job:
        active[JOB_BID_ID] = Bid(id=JOB_BID_ID, price=job.bid, chips=job.chips, placed_at=0.0)
    for index, step in enumerate(steps):
        for bid_id in step.departures:
            active.pop(bid_id, None)
            holding.pop(bid_id, None)
        for bid in step.arrivals:
            active[bid.id] = bid
        capacity = max(market.capacity - step.on_demand, 0)
        result = clear(active.values(), capacity, market.floor)
        lost = displaced(result, holding)
        at = index * step_seconds
        run.rounds.append(
            Round(at, result.price, result.demand, capacity, result.allocated, len(lost), sum(lost.values()))
        )
        holding = dict(result.awards)
        if run.job and not run.job.finished:
            _charge_job(run.job, result.chips_won(JOB_BID_ID), JOB_BID_ID in lost, result.price, at, step_seconds)
            if run.job.finished:
                # A finished job gives its chips back; that is not a reclaim.
                active.pop(JOB_BID_ID)
                holding.pop(JOB_BID_ID, None)
    return run


def _charge_job(outcome: JobOutcome, won: int, reclaimed: bool, price: int, at: int, step_seconds: int) -> None:
    outcome.interruptions += reclaimed
    if not won:
        outcome.waiting_seconds += step_seconds
        return
    ran = min(won * step_seconds, outcome.job.chip_seconds - outcome.chip_seconds)
    outcome.chip_seconds += ran
    outcome.cost_chip_seconds += price * ran
    if outcome.chip_seconds >= outcome.job.chip_seconds:
        outcome.finished_at = at + math.ceil(ran / won)


def generate_steps(market: ChipMarket, *, seed: int, hours: int, step_seconds: int) -> list[Step]:
    """A seeded day of spot bids and on-demand arrivals for one chip type, following a daily curve.

    Each chip type draws from its own stream (seeded with the seed and its slug), so a chip's
    day is the same whichever other chip types are simulated with it.
    """
    rng = random.Random(f"{seed}:{market.slug}")
    bid_steps, on_demand_steps = BID_HOURS * HOUR / step_seconds, ON_DEMAND_HOURS * HOUR / step_seconds
    mean_bid_chips = sum(BID_CHIPS) / len(BID_CHIPS)
    mean_on_demand_chips = sum(ON_DEMAND_CHIPS) / len(ON_DEMAND_CHIPS)
    leaving: dict[int, list[int]] = {}
    on_demand_leaving: dict[int, list[int]] = {}
    next_id, on_demand_held, steps = JOB_BID_ID + 1, 0, []
    for index in range(hours * HOUR // step_seconds):
        level = daily_level((index * step_seconds / HOUR) % 24)
        spot_chips = market.capacity * (DEMAND_LOW + (DEMAND_HIGH - DEMAND_LOW) * level)
        if index == 0:
            # Start from a market already in its steady state rather than an empty one.
            count = round(spot_chips / mean_bid_chips)
        else:
            count = _poisson(rng, spot_chips / mean_bid_chips / bid_steps)
        arrivals = []
        for _ in range(count):
            placed_at = index * step_seconds + rng.random() * step_seconds
            if index == 0:
                placed_at -= rng.random() * BID_HOURS * HOUR
            arrivals.append(_random_bid(rng, market, next_id, placed_at))
            leave = index + max(1, round(rng.expovariate(1 / bid_steps)))
            leaving.setdefault(leave, []).append(next_id)
            next_id += 1
        on_demand_held -= sum(on_demand_leaving.pop(index, []))
        wanted = market.capacity * ON_DEMAND_SHARE * level / mean_on_demand_chips / on_demand_steps
        for _ in range(_poisson(rng, wanted)):
            chips = rng.choice(ON_DEMAND_CHIPS)
            if on_demand_held + chips <= market.capacity:  # otherwise it lands on other nodes
                on_demand_held += chips
                leave = index + max(1, round(rng.expovariate(1 / on_demand_steps)))
                on_demand_leaving.setdefault(leave, []).append(chips)
        steps.append(Step(tuple(arrivals), tuple(leaving.pop(index, [])), on_demand_held))
    return steps


def daily_level(hour_of_day: float) -> float:
    """Demand through the day, from 0 at 04:00 to 1 at 16:00."""
    return (1 - math.cos(2 * math.pi * (hour_of_day - 4) / 24)) / 2


def _random_bid(rng: random.Random, market: ChipMarket, bid_id: int, placed_at: float) -> Bid:
    # Most bidders offer a little above the floor, a few close to on-demand, and some below the
    # floor (those never win), in whole cents.
    share = rng.triangular(-0.15, 1.0, 0.2)
    price = market.floor + share * (market.on_demand - market.floor)
    price = max(CENT, round(price / CENT) * CENT)
    chips = min(rng.choice(BID_CHIPS), max(market.capacity, 1))
    return Bid(id=bid_id, price=price, chips=chips, placed_at=placed_at)


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: fine for the small per-step means here."""
    if mean <= 0:
        return 0
    if mean > 500:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def _hour_row(hour: int, rounds: list[Round]) -> HourRow:
    count = len(rounds)
    return HourRow(
        hour=hour,
        price=round(sum(r.price for r in rounds) / count),
        max_price=max(r.price for r in rounds),
        demand=sum(r.demand for r in rounds) / count,
        capacity=sum(r.capacity for r in rounds) / count,
        allocated=sum(r.allocated for r in rounds) / count,
        reclaims=sum(r.reclaims for r in rounds),
        reclaimed_chips=sum(r.reclaimed_chips for r in rounds),
    )


def _per_hour(price_chip_seconds: int) -> int:
    """Micro-units per chip-hour times chip-seconds, to micro-units: billing's rule (`kernel.money`)."""
    return cost_of_integral(price_chip_seconds * MICROSECONDS_PER_SECOND)
