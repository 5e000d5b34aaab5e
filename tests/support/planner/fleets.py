"""Builders and hypothesis strategies for planner tests: chips, fleets and requests in a line."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from kernel.modelspecs import resolve_model
from kernel.planner import POLICIES, ChipInfo, NodeOffer, PlanRequest, catalog_chips

CHIPS = {chip.slug: chip for chip in catalog_chips()}
SLUGS = sorted(CHIPS)


def chips(*slugs: str) -> list[ChipInfo]:
    return [CHIPS[slug] for slug in (slugs or SLUGS)]


def nodes(
    slug: str,
    count: int,
    free: int = 8,
    spot: bool = False,
    zone: str = "z1",
    start: int = 0,
    simulated: bool = False,
) -> list[NodeOffer]:
    """`count` nodes of one chip type in one pool, each with `free` free chips."""
    return [
        NodeOffer(
            f"{slug}-{zone}-{start + n:03d}",
            f"{slug}-{zone}-{start + n}.example",
            slug,
            free,
            spot,
            f"{slug}-{zone}",
            zone,
            simulated,
        )
        for n in range(count)
    ]


def request(model: str = "llama-2-7b", **fields) -> PlanRequest:
    defaults = {"per_device_batch_size": 4, "max_steps": 1000}
    return PlanRequest(model=resolve_model(model), **{**defaults, **fields})


def yuan(amount: float) -> int:
    return round(amount * 1_000_000)


@st.composite
def priced_chips(draw, max_types: int = 4) -> list[ChipInfo]:
    """A few chip types with prices moved within ±50% of the catalog's (spot may even exceed on-demand)."""
    slugs = draw(st.lists(st.sampled_from(SLUGS), min_size=1, max_size=max_types, unique=True))
    priced = []
    for slug in sorted(slugs):
        chip = CHIPS[slug]
        on_demand = draw(st.integers(chip.on_demand_per_hour // 2, chip.on_demand_per_hour * 3 // 2))
        spot = draw(st.integers(chip.spot_per_hour // 2, chip.spot_per_hour * 3 // 2))
        priced.append(replace(chip, on_demand_per_hour=on_demand, spot_per_hour=spot))
    return priced


@st.composite
def fleets(draw, chip_list: list[ChipInfo], max_nodes: int = 3, max_free: int = 3) -> list[NodeOffer]:
    offers = []
    for chip in chip_list:
        for _ in range(draw(st.integers(1, max_nodes))):
            number, zone = len(offers), draw(st.sampled_from(["z0", "z1"]))
            offers.append(
                NodeOffer(
                    f"n{number:03d}",
                    f"host-{number}",
                    chip.slug,
                    draw(st.integers(0, max_free)),
                    draw(st.booleans()),
                    f"{chip.slug}-{zone}",
                    zone,
                    draw(st.sampled_from([False, False, True])),
                )
            )
    return offers


@st.composite
def requests(draw, models=("llama-tiny", "llama-2-7b", "llama-2-13b"), max_budget: int = 60_000_000) -> PlanRequest:
    spot_only = draw(st.sampled_from([False, False, False, True]))
    return request(
        draw(st.sampled_from(models)),
        per_device_batch_size=draw(st.integers(1, 8)),
        max_steps=draw(st.integers(1, 5000)),
        policy=draw(st.sampled_from(POLICIES)),
        max_budget_per_hour=draw(st.one_of(st.none(), st.integers(300_000, max_budget))),
        allow_spot=spot_only or draw(st.booleans()),
        spot_only=spot_only,
        max_ranks=draw(st.sampled_from([3, 6, 12, 64])),
        global_batch=draw(st.sampled_from([None, None, None, 8, 24])),
        total_budget=draw(st.sampled_from([None, None, None, 5_000_000, 500_000_000])),
    )
