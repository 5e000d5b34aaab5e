"""From the database to the planner and back: what a job would get now, on the free chips or the whole fleet.

Planning reads; it places nothing (workers.services.scheduling and placement do).
"""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from billing.services.pricing import current_offers
from fleet.choices import AgentStatus
from fleet.models import Node
from kernel import planner
from kernel.modelfiles.hfconfig import lora_settings
from kernel.modelspecs import LORA, ModelSpec, spec_from_config
from kernel.spec import JobSpec
from workers.services import spot
from workers.services.capacity import free_chips, schedulable_nodes
from workers.services.island_reports import measured_bridges
from workers.services.lighthouses import islands_enabled
from workers.services.models import ModelSource, resolve_model_source
from workers.services.throughput import measured_history, measured_on_nodes


def chip_infos() -> dict[str, planner.ChipInfo]:
    """Specs and prices now; spot chips at the spot market's current clearing price."""
    return {
        offer.chip.slug: planner.ChipInfo(
            slug=offer.chip.slug,
            memory_gib=offer.chip.memory_gib,
            bf16_tflops=float(offer.chip.bf16_tflops),
            default_mfu=float(offer.chip.default_mfu),
            on_demand_per_hour=offer.on_demand_per_hour,
            spot_per_hour=offer.spot_per_hour,
            stack=offer.chip.software_stack,
        )
        for offer in current_offers()
        if offer.price is not None
    }


def node_offers(market: spot.ChipView | None = None) -> list[planner.NodeOffer]:
    """Free chips per schedulable node; for a spot job, as the spot market lets that job see them."""
    nodes = list(schedulable_nodes())
    free = free_chips(nodes)
    seen = market.adjust(nodes, free) if market else {node.pk: (free[node.pk], node.spot_eligible) for node in nodes}
    bridges = measured_bridges()
    offers = []
    for node in nodes:
        chip = node.pool.chip_type
        count, spot_eligible = seen[node.pk]
        if count > 0:
            offers.append(
                planner.NodeOffer(
                    node_id=str(node.pk),
                    hostname=node.hostname,
                    chip=chip.slug,
                    free_chips=count,
                    spot_eligible=spot_eligible,
                    pool=node.pool.name,
                    zone=node.pool.zone,
                    simulated=node.simulated,
                    **bridge_of(node, bridges),
                )
            )
    return offers


def bridge_of(node: Node, measured: dict[int, float]) -> dict:
    """The node's link to other islands for the planner: what it measured (`measured_bridges`), else
    what its pool declares (0: nothing, the planner's default)."""
    if node.pk in measured:
        return {"bridge_gbps": measured[node.pk], "bridge_measured": True}
    return {"bridge_gbps": node.pool.bridge_gbps, "bridge_measured": False}


def throughput_model(model_name: str) -> planner.ThroughputModel:
    """What each node measured on the model first; then the chip type's history (a simulated node's
    measure scaled back to its chip's real speed); then the FLOPs model."""
    measured: dict[tuple[str, str], float] = {}
    for (chip, simulated), tokens_per_s in sorted(measured_history(model_name).items(), key=lambda kv: kv[0][1]):
        real = tokens_per_s * settings.SIMULATION_SLOWDOWN if simulated else tokens_per_s
        measured.setdefault((model_name, chip), real)
    return planner.ThroughputModel(
        measured=measured,
        simulation_scale=1 / settings.SIMULATION_SLOWDOWN,
        per_node=measured_on_nodes(model_name),
    )


def model_spec(spec: JobSpec, source: ModelSource | None = None) -> ModelSpec:
    """What the planner sizes: the model's exact parameter count, and under LoRA the adapter's.

    `source` is the resolved model when the caller has it; else the job's reference is resolved here (it
    was checked against its owner when the job was made; raises ModelUnavailable).
    """
    source = source or resolve_model_source(spec.model_name)
    trainable = None
    if spec.mode == LORA:
        lora = lora_settings(spec.lora)
        trainable = source.shape.lora_parameters(int(lora["r"]), lora["target_modules"])
    return spec_from_config(
        spec.model_name,
        source.config,
        spec.seq_len or source.seq_len,
        parameters=source.shape.parameters,
        trainable=trainable,
        mode=spec.mode,
        description=source.description,
    )


def plan_request(spec: JobSpec) -> planner.PlanRequest:
    return planner.PlanRequest(
        model=model_spec(spec),
        per_device_batch_size=spec.per_device_batch_size,
        max_steps=max(spec.max_steps - spec.start_step, 1),  # a continuation's plan counts the steps left
        policy=spec.policy,
        max_budget_per_hour=spec.max_budget_per_hour,
        total_budget=spec.total_budget,
        chip_counts=spec.chip_counts or None,
        allow_spot=spec.spot,
        spot_only=spec.spot_only,
        global_batch=spec.global_batch,
        islands=islands_enabled(),
        sync_mode=spec.sync_mode or None,
        sync_every=spec.sync_every,
    )


def quote(spec: JobSpec, market: spot.ChipView | None = None) -> planner.Plan:
    """The plan the job would get now (raises planner.PlanningError)."""
    request, chips, offers, throughput = _planning_inputs(spec, market)
    return with_pacing(planner.plan(request, list(chips.values()), offers, throughput), request.model, chips)


# The policies a quote compares its plan with, in the order the page lists them.
COMPARED_POLICIES = ("cost-performance", "fastest", "cheapest", "single-type")


def policy_alternatives(spec: JobSpec, market: spot.ChipView | None = None) -> dict[str, planner.Plan | None]:
    """The plan each policy would pick for this job now, on the same chips, prices and speeds (None
    where a policy finds none), so a quote can show what its policy gave up and gained."""
    request, chips, offers, throughput = _planning_inputs(spec, market)
    plans: dict[str, planner.Plan | None] = {}
    for policy in COMPARED_POLICIES:
        try:
            plans[policy] = planner.plan(replace(request, policy=policy), list(chips.values()), offers, throughput)
        except planner.PlanningError:
            plans[policy] = None
    return plans


def _planning_inputs(spec: JobSpec, market: spot.ChipView | None):
    """What planning the job now reads: its request, chip prices, free chips and speeds."""
    request = plan_request(spec)
    chips = chip_infos()
    if market is None and spec.spot:
        market = spot.MarketView(bids=spot.bid_prices(spec))
    offers = node_offers(market)
    if spec.chip_types:  # a migrating job that may not change chip types
        offers = [offer for offer in offers if offer.chip in spec.chip_types]
    if spec.excluded_chip_types:  # its owner cancelled its bid for them: not on spot, nor on demand
        offers = [offer for offer in offers if offer.chip not in spec.excluded_chip_types]
    return request, chips, offers, throughput_model(request.model.name)


def enrolled_nodes():
    """Nodes the fleet has now, busy or not: enrolled and online, or draining."""
    return Node.objects.filter(agent_status__in=[AgentStatus.ONLINE, AgentStatus.DRAINING]).select_related(
        "pool__chip_type"
    )


def fleet_quote(spec: JobSpec) -> planner.Plan:
    """The plan the job would get if every chip of the enrolled fleet were free (raises planner.PlanningError).

    NoCapacity here means the fleet can never place the job, however long it waits.
    """
    request = plan_request(spec)
    bridges = measured_bridges()
    offers = [
        planner.NodeOffer(
            node_id=str(node.pk),
            hostname=node.hostname,
            chip=node.pool.chip_type.slug,
            free_chips=node.chips,
            spot_eligible=node.spot_eligible,
            pool=node.pool.name,
            zone=node.pool.zone,
            simulated=node.simulated,
            **bridge_of(node, bridges),
        )
        for node in enrolled_nodes()
        if node.chips > 0
    ]
    return planner.plan(request, list(chip_infos().values()), offers, throughput_model(request.model.name))


def fleet_chips(spot_only: bool = False) -> dict[str, int]:
    """Chips of each type in the enrolled fleet (only spot-eligible ones with `spot_only`)."""
    counts: dict[str, int] = {}
    for node in enrolled_nodes():
        if node.spot_eligible or not spot_only:
            slug = node.pool.chip_type.slug
            counts[slug] = counts.get(slug, 0) + node.chips
    return counts


def with_pacing(plan: planner.Plan, model, chips: dict[str, planner.ChipInfo]) -> planner.Plan:
    """Simulated ranks train paced to their chip's modelled speed, scaled down fleet-wide."""
    flops_model = planner.ThroughputModel()
    plan.ranks = [
        replace(
            rank, paced_tokens_per_s=flops_model.tokens_per_s(model, chips[rank.chip]) / settings.SIMULATION_SLOWDOWN
        )
        if rank.simulated
        else rank
        for rank in plan.ranks
    ]
    return plan
