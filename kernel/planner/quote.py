"""The planner's entry points: validate a request, search, and turn the best mix into a `Plan`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal

from kernel.money import round_micros
from kernel.planner.diagnose import explain_failure, hand_picked_options
from kernel.planner.evaluate import OBJECTIVES, Candidate, Evaluator, total_cost
from kernel.planner.fleet import Kind, build_kinds
from kernel.planner.islands import one_backend
from kernel.planner.memory import GIB, rank_bytes
from kernel.planner.search import exhaustive, optimise
from kernel.planner.throughput import MEASURED_ON_NODE, ThroughputModel, link_gbps
from kernel.planner.types import (
    POLICIES,
    ChipInfo,
    InvalidRequest,
    NoCapacity,
    NodeOffer,
    Plan,
    PlanRequest,
    Rank,
)
from kernel.protocol import SYNC_DILOCO, SYNC_MODES

Optimiser = Callable[..., Candidate | None]
KindsBuilder = Callable[[PlanRequest, Sequence[ChipInfo], Sequence[NodeOffer], ThroughputModel], list[Kind]]
_POLICY_KEYS = [OBJECTIVES[policy] for policy in ("cost-performance", "fastest", "cheapest")]


def plan(
    request: PlanRequest,
    chips: Sequence[ChipInfo],
    offers: Sequence[NodeOffer],
    throughput: ThroughputModel | None = None,
) -> Plan:
    """The best plan for the request's policy, with the best single-type plan as its baseline.

    Raises a `PlanningError` subclass naming the problem when no plan is possible.
    """
    return _quote(request, chips, offers, throughput or ThroughputModel(), optimise)


def exhaustive_plan(
    request: PlanRequest,
    chips: Sequence[ChipInfo],
    offers: Sequence[NodeOffer],
    throughput: ThroughputModel | None = None,
) -> Plan:
    """Same as `plan` but by enumerating every count vector: the reference for small instances."""
    return _quote(request, chips, offers, throughput or ThroughputModel(), exhaustive)


def validate(request: PlanRequest) -> None:
    """Refuse malformed requests before any search, naming the field and the value."""
    checks = [
        (
            request.policy in POLICIES,
            f"Unknown policy '{request.policy}'. Choose one of: {', '.join(POLICIES)}.",
        ),
        (_positive(request.max_steps), f"max_steps must be a positive integer, not {request.max_steps!r}."),
        (
            _positive(request.per_device_batch_size),
            f"per_device_batch_size must be a positive integer, not {request.per_device_batch_size!r}.",
        ),
        (_positive(request.max_ranks), f"max_ranks must be a positive integer, not {request.max_ranks!r}."),
        (_optional_positive(request.max_budget_per_hour), "max_budget_per_hour must be positive when given."),
        (_optional_positive(request.total_budget), "total_budget must be positive when given."),
        (_optional_positive(request.global_batch), "global_batch must be a positive integer when given."),
    ]
    checks += [
        (
            request.sync_mode in (None, *SYNC_MODES),
            f"Unknown sync_mode '{request.sync_mode}'. Choose one of: {', '.join(SYNC_MODES)}.",
        ),
        (_optional_positive(request.sync_every), "sync_every must be a positive integer when given."),
        (
            request.sync_every in (None, 1) or request.sync_mode == SYNC_DILOCO,
            "sync_every applies to the diloco sync mode only: set sync_mode to 'diloco' as well.",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise InvalidRequest(message)
    for slug, count in (request.chip_counts or {}).items():
        if not _positive(count):
            raise InvalidRequest(f"chip_counts['{slug}'] must be a positive integer, not {count!r}.")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _optional_positive(value: object) -> bool:
    return value is None or _positive(value)


def _quote(request, chips, offers, throughput, optimiser: Optimiser, build: KindsBuilder = build_kinds) -> Plan:
    """`build` groups the offers into kinds; only kernel.planner.reference passes another (the old one)."""
    validate(request)
    kinds = build(request, chips, offers, throughput)
    if not kinds:
        if request.spot_only:
            raise NoCapacity.of("No free chips eligible for spot to plan on.")
        raise NoCapacity.of("No free chips to plan on.")
    ev = Evaluator(request, kinds, request.max_budget_per_hour)
    if not request.islands:
        optimiser = one_backend(optimiser, kinds)  # real and simulated chips never share a job without islands
    policy = "cost-performance" if request.policy == "single-type" else request.policy
    key = OBJECTIVES[policy]
    best = _choose(request, chips, ev, key, optimiser)
    if best is None:
        raise explain_failure(request, kinds, ev, optimiser, chips)
    baseline = _best_single_type(ev, key, optimiser)
    return _with_baseline(_assemble(request, ev, best), _assemble(request, ev, baseline) if baseline else None)


def _choose(request, chips, ev: Evaluator, key, optimiser: Optimiser) -> Candidate | None:
    if request.chip_counts:
        found = [ev.evaluate(counts) for counts in hand_picked_options(request, chips, ev)]
        return min((candidate for candidate in found if candidate is not None), key=key, default=None)
    if request.policy == "single-type":
        return _best_single_type(ev, key, optimiser)
    # The search is a heuristic: a climb towards another policy's optimum can end on a mix that is
    # better by this policy's measure too. Take the best of the three (their evaluations are shared),
    # so no policy's plan is ever beaten on its own terms by a plan the quote shows beside it.
    found = [optimiser(ev, objective) for objective in _POLICY_KEYS if objective is not key]
    return min((c for c in [optimiser(ev, key), *found] if c is not None), key=key, default=None)


def _best_single_type(ev: Evaluator, key, optimiser: Optimiser) -> Candidate | None:
    """The best plan on one chip type (the "pure GPU" comparison every quote carries)."""
    best = None
    for slug in sorted({kind.slug for kind in ev.kinds}):
        allowed = [i for i, kind in enumerate(ev.kinds) if kind.slug == slug]
        candidate = optimiser(ev, key, allowed)
        if candidate is not None and (best is None or key(candidate) < key(best)):
            best = candidate
    return best


def _with_baseline(chosen: Plan, baseline: Plan | None) -> Plan:
    if baseline is None:
        return chosen
    speedup = chosen.tokens_per_s / baseline.tokens_per_s
    per_token = chosen.price_per_hour / chosen.tokens_per_s
    baseline_per_token = baseline.price_per_hour / baseline.tokens_per_s
    return replace(
        chosen,
        baseline=baseline,
        speedup_vs_baseline=speedup,
        cost_ratio_vs_baseline=per_token / baseline_per_token,
    )


def _assemble(request: PlanRequest, ev: Evaluator, best: Candidate) -> Plan:
    kinds = ev.kinds
    ranks = _ranks(request, ev, best)
    if best.bridge is not None:  # each island's ranks numbered together: the job's rank = island's first + own
        first_seen = {island: n for n, island in enumerate(dict.fromkeys(rank.island for rank in ranks))}
        ranks.sort(key=lambda rank: first_seen[rank.island])
    seq = request.model.seq_len
    return Plan(
        policy=request.policy,
        model=request.model.name,
        ranks=ranks,
        zero_stage=best.zero_stage,
        global_batch=best.global_batch,
        tokens_per_step=best.global_batch * seq,
        step_seconds=best.compute_seconds + best.comm_seconds,
        comm_seconds=best.comm_seconds,
        link_gbps=link_gbps(best.cross_pool),
        tokens_per_s=best.tokens_per_s,
        price_per_hour=best.price_per_hour,
        price_per_million_tokens=_per_million_tokens(best.price_per_hour, best.tokens_per_s),
        eta_seconds=best.eta_seconds,
        total_cost=total_cost(best.price_per_hour, best.eta_seconds),
        throughput_source={k.slug: k.source for k, c in zip(kinds, best.counts, strict=True) if c},
        chip_counts=chip_counts_of(ranks),
        overhead_seconds=max(k.overhead_s for k, c in zip(kinds, best.counts, strict=True) if c),
        uncertainty=_uncertainty([k for k, c in zip(kinds, best.counts, strict=True) if c]),
        bridge=best.bridge,
        steps=request.max_steps,
    )


# The least a measured estimate claims: runs on a shared host never repeat exactly.
MIN_UNCERTAINTY = 0.05


def _uncertainty(used: list) -> float | None:
    """±(twice the largest spread measured on the plan's nodes), about a p90 for errors that scatter
    normally; None when some rank's node has no measurement for this model."""
    if not all(kind.source == MEASURED_ON_NODE for kind in used):
        return None
    return max(MIN_UNCERTAINTY, 2 * max(kind.spread for kind in used))


def _per_million_tokens(price_per_hour: int, tokens_per_s: float) -> int:
    return round_micros(Decimal(price_per_hour) * 1_000_000 / (Decimal(tokens_per_s) * 3600))


def _ranks(request: PlanRequest, ev: Evaluator, best: Candidate) -> list[Rank]:
    ranks = []
    for kind, count, share in zip(ev.kinds, best.counts, ev.shares(best), strict=True):
        for position, slot in enumerate(kind.slots[:count]):
            micro = share.base + (1 if position < share.extras else 0)
            memory = rank_bytes(request.model, best.zero_stage, best.ranks, micro) / GIB
            node = slot.node
            ranks.append(
                Rank(
                    chip=kind.slug,
                    node_id=node.node_id,
                    hostname=node.hostname,
                    pool=node.pool,
                    micro_batch=micro,
                    mode=slot.mode,
                    tokens_per_s=kind.speed,
                    memory_gib=memory,
                    simulated=node.simulated,
                    island=kind.island,
                )
            )
    return ranks


def chip_counts_of(ranks: list[Rank]) -> dict[str, dict[str, int]]:
    """{chip: {mode: ranks}} of a list of ranks (a plan's `chip_counts`)."""
    counts: dict[str, dict[str, int]] = {}
    for rank in ranks:
        per_mode = counts.setdefault(rank.chip, {})
        per_mode[rank.mode] = per_mode.get(rank.mode, 0) + 1
    return counts
