"""Planner benchmark: plan time at fleet scale, and the gap to exhaustive search.

    .venv/bin/python bench/planner.py [--large 200] [--small 100] [--chips 10000] [--seed 1]

Large instances: the 7 catalog chip types with prices drawn within ±50% of the catalog's, about
`--chips` free chips on 4- and 8-chip nodes in 1-3 zones per type, a random model, batch,
policy, spot allowance and hourly budget. Small instances: 2-4 chip types with a few free chips
each, small enough to enumerate every count vector; the gap is how much worse the planner's
objective is than the exhaustive optimum for the same policy (0% = it found the optimum).
Targets: p50 <= 50 ms at 10,000 free chips; gap <= 1%.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.modelspecs import MODELS  # noqa: E402
from workers.planner import (  # noqa: E402
    POLICIES,
    ChipInfo,
    NodeOffer,
    PlanningError,
    PlanRequest,
    catalog_chips,
    exhaustive_plan,
    objective_value,
    plan,
)

BIG_MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b"]


def random_prices(rng: random.Random, chips: list[ChipInfo]) -> list[ChipInfo]:
    """Catalog prices moved independently within ±50%, spot kept below on-demand."""
    priced = []
    for chip in chips:
        on_demand = int(chip.on_demand_per_hour * rng.uniform(0.5, 1.5))
        spot = min(int(chip.spot_per_hour * rng.uniform(0.5, 1.5)), on_demand - 1)
        priced.append(replace(chip, on_demand_per_hour=on_demand, spot_per_hour=spot))
    return priced


def random_fleet(rng: random.Random, chips: list[ChipInfo], total: int, node_sizes=(4, 8)) -> list[NodeOffer]:
    offers, per_type = [], total // len(chips)
    for chip in chips:
        zones = rng.randint(1, 3)
        left = per_type
        while left > 0:
            free = min(rng.choice(node_sizes), left)
            zone = f"z{rng.randrange(zones)}"
            number = len(offers)
            offers.append(
                NodeOffer(
                    f"n{number:05d}",
                    f"host-{number}",
                    chip.slug,
                    free,
                    rng.random() < 0.4,
                    f"{chip.slug}-{zone}",
                    zone,
                )
            )
            left -= free
    return offers


def random_request(rng: random.Random, models: list[str], budget_range: tuple[int, int]) -> PlanRequest:
    budget = None if rng.random() < 0.1 else rng.randint(*budget_range)
    return PlanRequest(
        model=MODELS[rng.choice(models)],
        per_device_batch_size=rng.choice([1, 2, 4, 8]),
        max_steps=1000,
        policy=rng.choice(POLICIES),
        max_budget_per_hour=budget,
        allow_spot=rng.random() < 0.5,
    )


def time_large(count: int, chips_total: int, seed: int) -> tuple[list[float], list[float], int, int]:
    """Wall-clock and CPU milliseconds per plan (CPU shows what other load on the host adds)."""
    rng = random.Random(seed)
    wall, cpu, nodes, errors = [], [], 0, 0
    for _ in range(count):
        chips = random_prices(rng, catalog_chips())
        offers = random_fleet(rng, chips, chips_total)
        nodes = len(offers)
        request = random_request(rng, BIG_MODELS, (2_000_000, 400_000_000))
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            plan(request, chips, offers)
        except PlanningError:
            errors += 1
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return wall, cpu, nodes, errors


def small_instance(rng: random.Random) -> tuple[PlanRequest, list[ChipInfo], list[NodeOffer]]:
    chips = rng.sample(random_prices(rng, catalog_chips()), rng.randint(2, 4))
    offers = []
    for chip in chips:
        for _ in range(rng.randint(1, 3)):
            number = len(offers)
            zone = f"z{rng.randrange(2)}"
            offers.append(
                NodeOffer(
                    f"n{number:03d}",
                    f"host-{number}",
                    chip.slug,
                    rng.randint(1, 3),
                    rng.random() < 0.5,
                    f"{chip.slug}-{zone}",
                    zone,
                )
            )
    request = random_request(rng, ["llama-2-7b", "llama-2-13b", "llama-2-13b"], (1_000_000, 60_000_000))
    return replace(request, max_ranks=rng.choice([6, 12, 64])), chips, offers


def gaps_small(count: int, seed: int) -> tuple[list[float], int]:
    """Percent by which the planner's objective exceeds the exhaustive optimum, per instance."""
    rng = random.Random(seed)
    gaps, infeasible = [], 0
    while len(gaps) < count:
        request, chips, offers = small_instance(rng)
        try:
            best = exhaustive_plan(request, chips, offers)
        except PlanningError:
            infeasible += 1
            continue
        found = plan(request, chips, offers)
        policy = "cost-performance" if request.policy == "single-type" else request.policy
        gap = objective_value(found, policy) / objective_value(best, policy) - 1
        gaps.append(max(gap, 0.0) * 100)
    return gaps, infeasible


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=200)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--chips", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    met = True
    if args.large:
        wall, cpu, nodes, errors = time_large(args.large, args.chips, args.seed)
        print(f"{'instance':<46}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}{'cpu p50':>9}")
        label = f"7 chip types, {args.chips} free chips, {nodes} nodes"
        p50 = percentile(wall, 0.5)
        p95, cpu50 = percentile(wall, 0.95), percentile(cpu, 0.5)
        print(f"{label:<46}{p50:>8.1f}{p95:>8.1f}{max(wall):>8.1f}{cpu50:>9.1f}")
        print(
            f"  ({args.large} random instances, {errors} answered with a PlanningError; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
        )
        met = p50 <= 50
    if args.small:
        gaps, infeasible = gaps_small(args.small, args.seed)
        optimal = sum(1 for g in gaps if g < 1e-9)
        print(f"\n{'small instances vs exhaustive':<46}{'max gap':>8}{'mean gap':>9}{'optimal':>9}")
        label = f"{len(gaps)} instances, 2-4 chip types, <= 9 chips each"
        print(f"{label:<46}{max(gaps):>7.3f}%{statistics.mean(gaps):>8.3f}%{optimal:>9}")
        print(f"  ({infeasible} drawn instances had no feasible plan and were redrawn)")
        met = met and max(gaps) <= 1.0
    print(f"\ntargets (p50 <= 50 ms at 10,000 chips, gap <= 1%): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
