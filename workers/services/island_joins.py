"""New chips join a running job of islands as a new island (docs/ISLANDS.md).

When islands of a run have left (their chips reclaimed or lost), the others train on with a smaller
global batch. The planning pass offers such a job the free chips of one stack as a new island: the
best plan, by the job's own policy, for the batch the leavers had, within what is left of its hourly
budget and its owner's credit. The new island is numbered after every earlier one, its ranks after
every earlier rank; it starts with a fresh rendezvous of its own, asks the job's Lighthouse to join,
and torchft heals it from a healthy island before its first step (hosts/runtime/islands/). The job
keeps its status and epoch: nothing else restarts.

Spot jobs are left as they are: their chips come from the spot market's clearing, not from here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.services.holds import HoldRefused, check_hold, lock_credit
from fleet.choices import JobEventKind, JobStatus
from fleet.models import Allocation, Job, Node
from kernel import planner
from kernel.planner.evaluate import objective_value
from kernel.planner.quote import chip_counts_of
from kernel.spec import JobSpec
from kernel.stacks import CATALOG_STACKS, island_of
from market.services.commitments import commitments
from workers.services import planning
from workers.services.capacity import free_chips
from workers.services.events import record_event
from workers.services.placement import new_allocation, queue_start_commands


def grow_runs(now: datetime | None = None) -> int:
    """Offer every running job of islands that lost some a new island on free chips; how many joined."""
    now = now or timezone.now()
    jobs = Job.objects.filter(status=JobStatus.RUNNING, spot=False, cancel_requested_at__isnull=True).exclude(
        island_stats={}
    )
    # Every planning pass runs this: read the small island figures, and a job's plan only when one left.
    waiting = [job_id for job_id, stats in jobs.values_list("pk", "island_stats") if _unreplaced(stats)]
    return sum(bool(add_island(job_id, now)) for job_id in waiting)


def _unreplaced(stats: dict) -> bool:
    return any(figures.get("left") and figures.get("replaced_by") is None for figures in stats.values())


def missing_batch(job: Job) -> int:
    """Samples per step of the islands that left and weren't replaced yet."""
    if job.plan is None or job.plan.bridge is None:
        return 0
    batches = {island["index"]: island["batch"] for island in job.plan.islands()}
    stats = job.island_stats or {}
    return sum(
        batches.get(int(index), 0)
        for index, figures in stats.items()
        if figures.get("left") and figures.get("replaced_by") is None
    )


def add_island(job_id: int, now: datetime) -> int | None:
    """Place a new island for the job; its number, or None when no free chips fit."""
    job = Job.objects.get(pk=job_id)
    batch = missing_batch(job)
    offer = _plan_island(job, batch) if batch else None
    if offer is None:
        return None
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.RUNNING or missing_batch(job) != batch:
            return None
        wanted: dict[int, list[planner.Rank]] = defaultdict(list)
        for rank in offer.ranks:
            wanted[rank.node_pk].append(rank)
        nodes = {node.pk: node for node in Node.objects.select_for_update().filter(pk__in=wanted).order_by("pk")}
        free = free_chips(nodes.values())
        if any(free.get(node_id, 0) < len(ranks) for node_id, ranks in wanted.items()):
            return None  # taken meanwhile: the next pass tries again
        price = job.plan.price_per_hour + offer.price_per_hour
        try:
            lock_credit(job.owner)
            check_hold(job.owner, price, committed=commitments(job.owner).total(without_job=job.pk))
        except HoldRefused:
            return None
        index = max(island["index"] for island in job.plan.islands()) + 1
        joined = [replace(rank, island_index=index) for rank in offer.ranks]
        ranks = [*job.plan.ranks, *joined]
        job.plan = replace(job.plan, ranks=ranks, price_per_hour=price, chip_counts=chip_counts_of(ranks))
        stats = dict(job.island_stats or {})
        for figures in stats.values():
            if figures.get("left") and figures.get("replaced_by") is None:
                figures["replaced_by"] = index
        job.island_stats = stats
        job.save(update_fields=["plan", "island_stats", "updated_at"])
        for node_id, node_ranks in wanted.items():
            new_allocation(job, nodes[node_id], node_ranks, now)
        all_nodes = {**nodes, **{a.node_id: a.node for a in Allocation.objects.open().filter(job=job)}}
        queue_start_commands(job, job.plan, all_nodes, now, only_island=index)
        hosts = ", ".join(sorted(node.hostname for node in nodes.values()))
        record_event(
            job,
            JobEventKind.ISLAND,
            StoredText(
                gettext_noop(
                    "Island %(island)s (%(stack)s: %(chips)s chip(s) on %(hosts)s) joins the run, taking the batch "
                    "of the islands that left (%(batch)s samples a step); it starts from a healthy island's live state"
                ),
                island=index,
                stack=joined[0].island,
                chips=len(joined),
                hosts=hosts,
                batch=batch,
            ),
            data={"island": index, "change": "added", "ranks": list(range(len(ranks) - len(joined), len(ranks)))},
            now=now,
        )
    return index


def _plan_island(job: Job, batch: int) -> planner.Plan | None:
    """The best one-stack plan for `batch` samples a step on the free chips the job doesn't hold."""
    spec = JobSpec.of_job(job)
    held = set(Allocation.objects.open().filter(job=job).values_list("node_id", flat=True))
    budget = (job.max_budget_per_hour or 0) - job.plan.price_per_hour
    if budget <= 0:
        return None
    request = replace(
        planning.plan_request(spec),
        global_batch=batch,
        chip_counts=None,
        max_budget_per_hour=budget,
        total_budget=None,
        islands=False,
        allow_spot=False,
        spot_only=False,
    )
    chips = planning.chip_infos()
    offers = [offer for offer in planning.node_offers() if int(offer.node_id) not in held]
    by_island: dict[str, list[planner.NodeOffer]] = defaultdict(list)
    for offer in offers:
        stack = chips[offer.chip].stack if offer.chip in chips else CATALOG_STACKS.get(offer.chip, "")
        by_island[island_of(stack, offer.simulated)].append(offer)
    throughput = planning.throughput_model(request.model.name)
    best = None
    for island_offers in by_island.values():
        try:
            found = planner.plan(request, list(chips.values()), island_offers, throughput)
        except planner.PlanningError:
            continue
        if best is None or objective_value(found, _policy(request)) < objective_value(best, _policy(request)):
            best = found
    return planning.with_pacing(best, request.model, chips) if best else None


def _policy(request: planner.PlanRequest) -> str:
    return "cost-performance" if request.policy == "single-type" else request.policy
