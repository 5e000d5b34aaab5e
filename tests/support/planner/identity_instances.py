"""Random planning instances, reproducible from a seed, for checking that plans never change.

`tests/support/planner/make_golden.py` records what the planner answered on them into golden_plans.json,
and `test_plan_identity.py` checks today's planner still answers exactly that. The instances reach
every per-offer path of the planner: spot tiers, spot-only requests, simulated nodes, node
measurements (with and without a speed), empty nodes, chips the catalog doesn't price, hand-picked
counts, total budgets, pinned global batches, rank caps and several pools per zone.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace

from kernel.modelspecs import resolve_model
from kernel.planner import (
    POLICIES,
    ChipInfo,
    NodeOffer,
    Plan,
    PlanningError,
    PlanRequest,
    ThroughputModel,
    catalog_chips,
)
from kernel.planner.throughput import NodeMeasure

MODELS = ("llama-tiny", "llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-13b", "llama-2-70b")
# name -> (instances, free chips per instance): small ones are rugged, large ones exercise the per-offer path.
SIZES = {"small": (120, 40), "medium": (40, 1_000), "large": (4, 20_000), "huge": (2, 100_000)}


@dataclass(frozen=True)
class Instance:
    name: str
    request: PlanRequest
    chips: list[ChipInfo]
    offers: list[NodeOffer]
    throughput: ThroughputModel


def instances(size: str, seed: int = 2026) -> list[Instance]:
    """The `size` instances, the same on every run."""
    count, chips_total = SIZES[size]
    rng = random.Random(f"{seed}-{size}")
    return [_instance(rng, f"{size}-{n}", chips_total) for n in range(count)]


def _instance(rng: random.Random, name: str, chips_total: int) -> Instance:
    chips = _priced(rng, rng.sample(catalog_chips(), rng.randint(2, 7)))
    offers = _fleet(rng, chips, chips_total)
    return Instance(name, _request(rng, chips, chips_total), chips, offers, _throughput(rng, offers))


def _priced(rng: random.Random, chips: list[ChipInfo]) -> list[ChipInfo]:
    """Prices within ±50% of the catalog's; spot sometimes above on-demand (then never worth taking)."""
    return [
        replace(
            chip,
            on_demand_per_hour=int(chip.on_demand_per_hour * rng.uniform(0.5, 1.5)),
            spot_per_hour=int(chip.spot_per_hour * rng.uniform(0.5, 1.5)),
        )
        for chip in chips
    ]


def _fleet(rng: random.Random, chips: list[ChipInfo], total: int) -> list[NodeOffer]:
    slugs = [chip.slug for chip in chips] + ["unpriced-chip"]
    offers: list[NodeOffer] = []
    per_type = max(total // len(slugs), 1)
    simulated_share = rng.choice([0.0, 0.0, 0.3, 1.0])
    for slug in slugs:
        zones, left = rng.randint(1, 3), per_type
        while left > 0:
            free = min(rng.choice((0, 1, 2, 3, 4, 4, 8, 8)) if total < 100 else rng.choice((4, 8)), left)
            zone = f"z{rng.randrange(zones)}"
            number = rng.randrange(10**6)  # node ids out of order, and sometimes shared by two offers
            offers.append(
                NodeOffer(
                    node_id=str(number) if rng.random() < 0.98 else "7",
                    hostname=f"host-{number}",
                    chip=slug,
                    free_chips=free,
                    spot_eligible=rng.random() < 0.4,
                    pool=rng.choice((f"{slug}-{zone}", f"{slug}-{zone}", "", f"{slug}-{zone}-b")),
                    zone=zone,
                    simulated=rng.random() < simulated_share,
                )
            )
            left -= max(free, 1)
    rng.shuffle(offers)
    return offers


def _request(rng: random.Random, chips: list[ChipInfo], chips_total: int) -> PlanRequest:
    spot_only = rng.random() < 0.15
    chip_counts = None
    if rng.random() < 0.15:
        picked = rng.sample(chips, rng.randint(1, min(2, len(chips))))
        chip_counts = {chip.slug: rng.randint(1, 6) for chip in picked}
    big = chips_total >= 1_000
    return PlanRequest(
        model=resolve_model(rng.choice(MODELS)),
        per_device_batch_size=rng.choice((1, 2, 4, 8)),
        max_steps=rng.choice((1, 100, 1000, 5000)),
        policy=rng.choice(POLICIES),
        max_budget_per_hour=rng.choice((None, rng.randint(300_000, 400_000_000 if big else 60_000_000))),
        total_budget=rng.choice((None, None, None, 5_000_000, 500_000_000)),
        allow_spot=spot_only or rng.random() < 0.5,
        spot_only=spot_only,
        chip_counts=chip_counts,
        max_ranks=rng.choice((12, 64, 128, 128, 256) if big else (3, 6, 12, 64, 64)),
        global_batch=rng.choice((None, None, None, 8, 24)),
    )


def _throughput(rng: random.Random, offers: list[NodeOffer]) -> ThroughputModel:
    """Sometimes measured per chip type, sometimes per node (a few nodes measured only on other models)."""
    per_node = {}
    if rng.random() < 0.4:
        for offer in rng.sample(offers, min(len(offers), rng.randint(1, 40))):
            speed = rng.choice((0.0, 900.0, 1500.0, 2500.0))
            per_node[offer.node_id] = NodeMeasure(speed, rng.choice((0.0, 30.0)), rng.choice((0.0, 0.02, 0.1)))
    measured = {("llama-2-7b", "rtx-4090"): 1234.5} if rng.random() < 0.3 else {}
    return ThroughputModel(measured=measured, simulation_scale=rng.choice((1.0, 0.5)), per_node=per_node)


def answer(planner, instance: Instance) -> dict:
    """What `planner(request, chips, offers, throughput)` made of an instance: a digest of the full
    plan (every rank, node and float as repr shows them) and a readable summary, or the error."""
    try:
        plan: Plan = planner(instance.request, instance.chips, instance.offers, instance.throughput)
    except PlanningError as error:
        return {"error": type(error).__name__, "message": str(error)}
    return {
        "digest": hashlib.sha256(repr(plan).encode()).hexdigest(),
        "chip_counts": plan.chip_counts,
        "nodes": sorted({rank.node_id for rank in plan.ranks})[:8],
        "price_per_hour": plan.price_per_hour,
        "eta_seconds": repr(plan.eta_seconds),
    }
