"""Replay a generated day of spot demand against the real auction code and print what happened."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Sum

from billing.models import Price
from fleet.models import ChipType, Node
from kernel.money import InvalidAmount, format_amount, format_price, to_micros
from market.simulation import HOUR, ChipMarket, MarketRun, SpotJob, simulate

# Chips assumed for a chip type that has no spot-eligible node yet, so the command says
# something useful on a freshly seeded catalog; the output says when it was assumed.
DEFAULT_CAPACITY = 64


def mean_price(micros: int) -> str:
    """A mean of prices, shown to ¥0.0001 (the prices themselves are whole cents)."""
    return format_amount(round(micros, -2))


class Command(BaseCommand):
    help = (
        "Simulate a day of spot bids and on-demand arrivals per chip type from a seed, cleared by the real "
        "auction code: hourly price path, reclaims, and what a given job would cost on spot against on-demand. "
        "Reads the catalog; writes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1, help="Seed of the generated demand (default 1).")
        parser.add_argument("--hours", type=int, default=24, help="Hours to simulate (default 24).")
        parser.add_argument("--step-seconds", type=int, default=60, help="Seconds between clearings (default 60).")
        parser.add_argument(
            "--chip", nargs="+", metavar="SLUG", help="Chip types to simulate (default: every priced chip type)."
        )
        parser.add_argument(
            "--capacity",
            type=int,
            help=f"Spot-eligible chips per chip type, instead of the catalog's nodes "
            f"(chip types with none are given {DEFAULT_CAPACITY}).",
        )
        parser.add_argument("--job-chips", type=int, default=4, help="Chips the example job wants (default 4).")
        parser.add_argument("--job-hours", default="6", help="Hours the example job runs on those chips (default 6).")
        parser.add_argument(
            "--job-bid",
            help="The job's maximum price per chip-hour, e.g. 2.5 (default: halfway between floor and on-demand).",
        )

    def handle(self, *args, seed, hours, step_seconds, chip, capacity, job_chips, job_hours, job_bid, **options):
        self.check_options(hours, step_seconds, capacity, job_chips)
        job_hours = self.parse_hours(job_hours)
        bid = self.parse_bid(job_bid)
        markets = self.load_markets(chip, capacity)
        self.stdout.write(
            f"SIMULATION of the spot market, not real data: seed {seed}, {hours} h in {step_seconds} s steps. "
            "Generated bids and on-demand arrivals are cleared by market.auction.clear; nothing is written."
        )
        for market, source in markets:
            job_bid_micros = bid if bid is not None else (market.floor + market.on_demand) // 2
            job = SpotJob(chips=job_chips, hours=float(job_hours), bid=job_bid_micros)
            (run,) = simulate([market], seed=seed, hours=hours, step_seconds=step_seconds, job=job)
            self.print_market(run, source)
            self.print_job(run, hours, default_bid=bid is None)

    def check_options(self, hours: int, step_seconds: int, capacity: int | None, job_chips: int) -> None:
        if hours < 1:
            raise CommandError("--hours must be at least 1.")
        if not 1 <= step_seconds <= HOUR:
            raise CommandError("--step-seconds must be between 1 and 3600.")
        if capacity is not None and capacity < 0:
            raise CommandError("--capacity cannot be negative.")
        if job_chips < 1:
            raise CommandError("--job-chips must be at least 1.")

    def parse_hours(self, text: str) -> Decimal:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise CommandError(f"--job-hours '{text}' is not a number.") from None
        if not value.is_finite() or value <= 0:
            raise CommandError("--job-hours must be a positive number.")
        return value

    def parse_bid(self, text: str | None) -> int | None:
        if text is None:
            return None
        try:
            bid = to_micros(text)
        except InvalidAmount as error:
            raise CommandError(f"--job-bid: {error}") from None
        if bid <= 0:
            raise CommandError("--job-bid must be more than 0.")
        return bid

    def load_markets(self, slugs: list[str] | None, capacity: int | None) -> list[tuple[ChipMarket, str]]:
        chips = ChipType.objects.all()
        if slugs:
            known = set(chips.values_list("slug", flat=True))
            unknown = [slug for slug in slugs if slug not in known]
            if unknown:
                raise CommandError(f"Unknown chip type(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}.")
            chips = chips.filter(slug__in=slugs)
        prices = {p.chip_type_id: p for p in Price.objects.in_force()}
        spot_chips = dict(
            Node.objects.filter(spot_eligible=True)
            .order_by()
            .values("pool__chip_type_id")
            .annotate(total=Sum("chips"))
            .values_list("pool__chip_type_id", "total")
        )
        markets = []
        for chip in chips:
            price = prices.get(chip.pk)
            if price is None:
                self.stdout.write(f"{chip.slug}: skipped, no price in force.")
                continue
            chosen, source = self.capacity_for(spot_chips.get(chip.pk, 0), capacity)
            markets.append((ChipMarket(chip.slug, chosen, price.spot_floor_per_hour, price.on_demand_per_hour), source))
        if not markets:
            raise CommandError("No chip type with a price to simulate; run `manage.py seed_catalog` first.")
        return markets

    def capacity_for(self, catalog_chips: int, override: int | None) -> tuple[int, str]:
        if override is not None:
            return override, "set by --capacity"
        if catalog_chips:
            return catalog_chips, "spot-eligible in the catalog"
        return DEFAULT_CAPACITY, f"assumed: no spot-eligible node in the catalog, so {DEFAULT_CAPACITY}"

    def print_market(self, run: MarketRun, source: str) -> None:
        market = run.market
        self.stdout.write(
            f"\n{market.slug}: {market.capacity} chips ({source}); floor {format_price(market.floor)}, "
            f"on-demand {format_price(market.on_demand)} per chip-hour"
        )
        price = f"price {settings.CURRENCY_SYMBOL}"
        self.stdout.write(
            f"{'hour':>5}{price:>10}{'max':>10}{'demand':>9}{'capacity':>10}{'allocated':>11}{'reclaims':>10}"
        )
        for row in run.hourly():
            self.stdout.write(
                f"{row.hour:>5}{mean_price(row.price):>10}{format_amount(row.max_price):>10}{row.demand:>9.1f}"
                f"{row.capacity:>10.1f}{row.allocated:>11.1f}{row.reclaims:>10}"
            )
        self.stdout.write(
            f"(price: mean clearing price over the hour; demand, capacity, allocated: mean chips per clearing)\n"
            f"reclaims: {run.reclaims} bid(s) lost chips to a later clearing, {run.reclaimed_chips} chip(s) in all"
        )

    def print_job(self, run: MarketRun, hours: int, default_bid: bool) -> None:
        outcome, market = run.job, run.market
        job = outcome.job
        how = " (halfway between floor and on-demand)" if default_bid else ""
        self.stdout.write(
            f"job: {job.chips} chip(s) for {job.hours:g} h, bidding {format_price(job.bid)} per chip-hour{how}"
        )
        if job.bid < market.floor:
            self.stdout.write("  its bid is below the floor: it never wins spot chips.")
        done = outcome.chip_seconds / HOUR
        if outcome.finished:
            finish = f"finished after {outcome.finished_at / HOUR:.1f} h"
        else:
            finish = f"not finished in {hours} h: ran {done:.1f} of {job.chip_seconds / HOUR:g} chip-hours"
        self.stdout.write(
            f"  spot: {format_price(outcome.spot_cost)} for {done:.1f} chip-hours, {finish}, "
            f"{outcome.interruptions} interruption(s), {outcome.waiting_seconds / HOUR:.1f} h waiting for chips"
        )
        same = outcome.on_demand_cost(market.on_demand)
        saving = f", {100 * (same - outcome.spot_cost) / same:.0f}% less on spot" if same else ""
        whole = f"the whole job: {format_price(job.on_demand_cost(market.on_demand))} in {job.hours:g} h"
        self.stdout.write(f"  on-demand: {format_price(same)} for the same chip-hours{saving} ({whole})")
