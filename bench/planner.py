"""Planner benchmark: plan time against fleet size, and the gap to exhaustive search.

    .venv/bin/python bench/planner.py [--large 100] [--sizes 1000,10000,100000] [--reference 30]
                                      [--small 100] [--seed 1]

Large instances: the 7 catalog chip types with prices drawn within ±50% of the catalog's, about
`--sizes` free chips (1x, 10x, 100x) on 4- and 8-chip nodes in 1-3 zones per type, a random model,
batch, policy, spot allowance and hourly budget. Per size: p50/p95 of `plan`'s wall and CPU time
(time.process_time: the honest figure on a shared machine), the time to build the NodeOffer
objects from database-like rows (as workers.services.planning.node_offers does per node; the ORM
query is not in it) and the load average. At the largest size the old per-offer path
(kernel.planner.reference) plans the first `--reference` instances too, interleaved with the new
one: its CPU time, the ratio, and how many plans came out identical.

Small instances: 2-4 chip types with a few free chips each, small enough to enumerate every count
vector; the gap is how much worse the planner's objective is than the exhaustive optimum for the
same policy (0% = it found the optimum).
Measured nodes (`--measured`): every node that ran the model is a kind of its own, and the search
grows faster than the square of the number of kinds, so past `MAX_KINDS` kinds the planner merges
measured nodes (kernel/planner/fleet.py). Per count of measured nodes in a 100,000-chip fleet
(each at 0.5-3x its chip's modelled speed, with its own start-up and spread): kinds before and after
the merge, and plan CPU with the merge and, up to `--unbounded-up-to` nodes, without it (the same
instances, interleaved).
Targets: p50 CPU <= 50 ms at 100,000 free chips; gap <= 1%.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.modelspecs import resolve_model  # noqa: E402
from kernel.planner import (  # noqa: E402
    POLICIES,
    ChipInfo,
    NodeOffer,
    PlanningError,
    PlanRequest,
    ThroughputModel,
    catalog_chips,
    exhaustive_plan,
    fleet,
    objective_value,
    plan,
)
from kernel.planner.reference import reference_plan  # noqa: E402
from kernel.planner.throughput import NodeMeasure  # noqa: E402

BIG_MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b"]


def random_prices(rng: random.Random, chips: list[ChipInfo]) -> list[ChipInfo]:
    """Catalog prices moved independently within ±50%, spot kept below on-demand."""
    priced = []
    for chip in chips:
        on_demand = int(chip.on_demand_per_hour * rng.uniform(0.5, 1.5))
        spot = min(int(chip.spot_per_hour * rng.uniform(0.5, 1.5)), on_demand - 1)
        priced.append(replace(chip, on_demand_per_hour=on_demand, spot_per_hour=spot))
    return priced


Row = tuple[str, str, str, int, bool, str, str]


def random_rows(rng: random.Random, chips: list[ChipInfo], total: int, node_sizes=(4, 8)) -> list[Row]:
    """(node id, hostname, chip, free chips, spot-eligible, pool, zone) per node, as a query would return them."""
    rows, per_type = [], total // len(chips)
    for chip in chips:
        zones = rng.randint(1, 3)
        left = per_type
        while left > 0:
            free = min(rng.choice(node_sizes), left)
            zone = f"z{rng.randrange(zones)}"
            number = len(rows)
            rows.append(
                (f"n{number:05d}", f"host-{number}", chip.slug, free, rng.random() < 0.4, f"{chip.slug}-{zone}", zone)
            )
            left -= free
    return rows


def offers_from_rows(rows: list[Row]) -> list[NodeOffer]:
    """What workers.services.planning.node_offers builds per node, minus the ORM."""
    return [
        NodeOffer(
            node_id=node_id,
            hostname=hostname,
            chip=chip,
            free_chips=free,
            spot_eligible=spot,
            pool=pool,
            zone=zone,
            simulated=False,
        )
        for node_id, hostname, chip, free, spot, pool, zone in rows
    ]


def random_request(rng: random.Random, models: list[str], budget_range: tuple[int, int]) -> PlanRequest:
    budget = None if rng.random() < 0.1 else rng.randint(*budget_range)
    return PlanRequest(
        model=resolve_model(rng.choice(models)),
        per_device_batch_size=rng.choice([1, 2, 4, 8]),
        max_steps=1000,
        policy=rng.choice(POLICIES),
        max_budget_per_hour=budget,
        allow_spot=rng.random() < 0.5,
    )


@dataclass
class Timings:
    """Milliseconds per instance at one fleet size; `old_cpu` for the reference path where it ran."""

    chips: int
    nodes: int = 0
    errors: int = 0
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    offers_cpu: list[float] = field(default_factory=list)
    new_cpu: list[float] = field(default_factory=list)  # the new path on the instances the old one ran on
    old_cpu: list[float] = field(default_factory=list)
    identical: int = 0
    load: float = 0.0


def time_large(count: int, chips_total: int, seed: int, reference: int = 0) -> Timings:
    """Plan `count` random instances of about `chips_total` free chips; the first `reference` of them
    also with the old per-offer path, alternating which goes first so both see the same load."""
    rng = random.Random(f"{seed}-{chips_total}")
    timings = Timings(chips_total)
    for number in range(count):
        chips = random_prices(rng, catalog_chips())
        rows = random_rows(rng, chips, chips_total)
        request = random_request(rng, BIG_MODELS, (2_000_000, 400_000_000))
        offers, _, offers_cpu = measured(offers_from_rows, rows)
        timings.offers_cpu.append(offers_cpu)
        timings.nodes = len(offers)
        new, wall, cpu = measured(plan_or_error, plan, request, chips, offers)
        timings.wall.append(wall)
        timings.cpu.append(cpu)
        timings.errors += isinstance(new, PlanningError)
        if number < reference:
            old, _, old_cpu = measured(plan_or_error, reference_plan, request, chips, offers)
            if number % 2:  # the new path second this time
                new, _, cpu = measured(plan_or_error, plan, request, chips, offers)
            timings.new_cpu.append(cpu)
            timings.old_cpu.append(old_cpu)
            timings.identical += same_answer(new, old)
    timings.load = os.getloadavg()[0]
    return timings


@dataclass
class MeasuredTimings:
    """Plan CPU ms over fleets with `nodes` measured nodes: merged (shipped) and, where run, unmerged."""

    nodes: int
    kinds_before: list[int] = field(default_factory=list)
    kinds_after: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    unbounded_cpu: list[float] = field(default_factory=list)


def with_measured_nodes(rng: random.Random, request: PlanRequest, chips, offers, count: int) -> ThroughputModel:
    """`count` random nodes measured on the request's model at 0.5-3x their chip's modelled speed."""
    by_slug, modelled = {chip.slug: chip for chip in chips}, ThroughputModel()
    per_node = {
        node.node_id: NodeMeasure(
            modelled.tokens_per_s(request.model, by_slug[node.chip]) * rng.uniform(0.5, 3.0),
            rng.uniform(5, 60),
            rng.uniform(0.0, 0.1),
        )
        for node in rng.sample(offers, count)
    }
    return ThroughputModel(per_node=per_node)


def time_measured(count: int, measured_nodes: int, seed: int, unbounded: bool) -> MeasuredTimings:
    rng = random.Random(f"{seed}-measured-{measured_nodes}")
    timings = MeasuredTimings(measured_nodes)
    shipped = fleet.MAX_KINDS
    for number in range(count):
        chips = random_prices(rng, catalog_chips())
        offers = offers_from_rows(random_rows(rng, chips, 100_000))
        request = random_request(rng, BIG_MODELS, (2_000_000, 400_000_000))
        throughput = with_measured_nodes(rng, request, chips, offers, measured_nodes)
        runs = [shipped, 10**9] if unbounded else [shipped]
        for bound in runs if number % 2 == 0 else runs[::-1]:
            fleet.MAX_KINDS = bound
            try:
                _, _, cpu = measured(plan_or_error, plan, request, chips, offers, throughput)
                kinds = len(fleet.build_kinds(request, chips, offers, throughput))
            finally:
                fleet.MAX_KINDS = shipped
            (timings.cpu if bound == shipped else timings.unbounded_cpu).append(cpu)
            (timings.kinds_after if bound == shipped else timings.kinds_before).append(kinds)
    return timings


def measured(work, *args):
    """(result, wall ms, CPU ms)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = work(*args)
    return result, (time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000


def plan_or_error(planner, request, chips, offers, throughput=None):
    try:
        return planner(request, chips, offers, throughput)
    except PlanningError as error:
        return error


def same_answer(new, old) -> bool:
    if isinstance(new, PlanningError) or isinstance(old, PlanningError):
        return type(new) is type(old) and str(new) == str(old)
    return new == old


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
    parser.add_argument("--large", type=int, default=100, help="random instances per fleet size")
    parser.add_argument("--sizes", default="1000,10000,100000", help="free chips per instance (comma-separated)")
    parser.add_argument("--reference", type=int, default=30, help="instances the old path also plans (largest size)")
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--measured", default="0,20,200,2000", help="measured nodes per 100k fleet (comma-separated)")
    parser.add_argument("--measured-instances", type=int, default=10, help="instances per count of measured nodes")
    parser.add_argument("--unbounded-up-to", type=int, default=50, help="also plan without the merge up to this many")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    met = True
    if args.large:
        print(
            f"{'size':<6}{'free chips':>11}{'nodes':>7}{'p50 ms':>8}{'p95 ms':>8}{'cpu p50':>9}{'cpu p95':>9}"
            f"{'offers ms':>10}{'errors':>7}{'load':>6}"
        )
        for size in sizes:
            t = time_large(args.large, size, args.seed, args.reference if size == sizes[-1] else 0)
            scale = f"{size // sizes[0]}x"
            print(
                f"{scale:<6}{size:>11,}{t.nodes:>7}{percentile(t.wall, 0.5):>8.1f}{percentile(t.wall, 0.95):>8.1f}"
                f"{percentile(t.cpu, 0.5):>9.1f}{percentile(t.cpu, 0.95):>9.1f}"
                f"{percentile(t.offers_cpu, 0.5):>10.1f}{t.errors:>7}{t.load:>6.1f}"
            )
        cpu50 = percentile(t.cpu, 0.5)
        print(
            f"  ({args.large} random instances per size, 7 chip types; ms are per plan, offers ms is the CPU time to "
            f"build the NodeOffers; {os.cpu_count()} CPUs, load average at the end of each row)"
        )
        if t.old_cpu:
            old50, new50 = percentile(t.old_cpu, 0.5), percentile(t.new_cpu, 0.5)
            print(
                f"\nold per-offer path at {sizes[-1]:,} chips, same {len(t.old_cpu)} instances: cpu p50 {old50:.1f} ms "
                f"(new {new50:.1f} ms, {old50 / new50:.1f}x faster); identical plans {t.identical}/{len(t.old_cpu)}"
            )
            met = met and t.identical == len(t.old_cpu)
        met = met and cpu50 <= 50
    if args.measured and args.measured_instances:
        print(
            f"\n{'measured nodes':>14}{'kinds':>12}{'cpu p50':>9}{'cpu p95':>9}{'unmerged kinds':>15}"
            f"{'unmerged p50':>13}{'unmerged max':>13}"
        )
        for count in sorted(int(n) for n in args.measured.split(",")):
            t = time_measured(args.measured_instances, count, args.seed, count <= args.unbounded_up_to)
            kinds = f"{min(t.kinds_after)}-{max(t.kinds_after)}"
            row = f"{count:>14,}{kinds:>12}{percentile(t.cpu, 0.5):>9.1f}{percentile(t.cpu, 0.95):>9.1f}"
            if t.unbounded_cpu:
                before = f"{min(t.kinds_before)}-{max(t.kinds_before)}"
                row += f"{before:>15}{percentile(t.unbounded_cpu, 0.5):>13.1f}{max(t.unbounded_cpu):>13.1f}"
            print(row)
        print(
            f"  (100,000 free chips, {args.measured_instances} instances per row; merged past {fleet.MAX_KINDS} kinds; "
            f"unmerged: the same instances with the bound lifted, interleaved; load {os.getloadavg()[0]:.1f})"
        )
    if args.small:
        gaps, infeasible = gaps_small(args.small, args.seed)
        optimal = sum(1 for g in gaps if g < 1e-9)
        print(f"\n{'small instances vs exhaustive':<46}{'max gap':>8}{'mean gap':>9}{'optimal':>9}")
        label = f"{len(gaps)} instances, 2-4 chip types, <= 9 chips each"
        print(f"{label:<46}{max(gaps):>7.3f}%{statistics.mean(gaps):>8.3f}%{optimal:>9}")
        print(f"  ({infeasible} drawn instances had no feasible plan and were redrawn)")
        met = met and max(gaps) <= 1.0
    target = f"p50 CPU <= 50 ms at {sizes[-1]:,} chips" if args.large else ""
    verdict = "met" if met else "NOT met"
    print(f"\ntargets ({target}{', ' if target else ''}gap <= 1%, plans identical to the old path): {verdict}")


if __name__ == "__main__":
    main()
