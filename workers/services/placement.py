"""Placing a job: allocate the plan's chips atomically, and tell the agents how to start its ranks.

Two jobs never get the same chip: allocation locks the chosen nodes' rows (in id order, so two
placements can't deadlock), re-counts their free chips under the lock, and only then inserts
allocations. Its locks follow the one order of market.services.locks (job, bids, nodes, credit),
and a placement that loses a deadlock anyway is run again. The agents learn about the new
placement through queued commands that are sent after the transaction commits.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.deadlocks import retry_on_deadlock
from base.stored_text import StoredText
from billing.services.holds import HoldRefused, check_hold, lock_credit
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation, Job, Node
from kernel.modelfiles.hfconfig import lora_settings
from kernel.modelspecs import LORA
from kernel.planner import Plan, Rank
from kernel.protocol import SYNC_DILOCO, CommandType, IslandLaunch, RankLaunch
from kernel.spec import JobSpec
from kernel.stacks import stack_of_chip
from kernel.storage import StorageError
from kernel.storage.locations import stored
from market.services.commitments import commitments
from market.services.locks import lock_job_bids
from market.services.reservations import end_job_reservations
from workers.services import commands, lifecycle, spot
from workers.services.capacity import free_chips
from workers.services.checkpoints import is_own_checkpoint, job_checkpoints, own_checkpoint_key
from workers.services.hyperparameters import job_hyperparameters
from workers.services.lighthouses import lighthouse_of
from workers.services.models import ModelUnavailable, resolve_model_source, store_hub_snapshot
from workers.services.planning import model_spec
from workers.services.replicas import engine_launch
from workers.services.storage_grants import issue_grant
from workers.services.tracking import launch_tracking


class CapacityChanged(Exception):
    """The chips the plan chose were taken before they could be allocated; plan again."""


def allocate(job: Job, plan: Plan, now=None) -> list[Allocation]:
    """Hold the plan's chips for the job and queue the start commands, in one transaction."""
    now = now or timezone.now()
    if not _model_files_stored(job, now):
        return []
    return _allocate(job, plan, now)


@retry_on_deadlock()
def _allocate(job: Job, plan: Plan, now) -> list[Allocation]:
    """The transaction of `allocate`; run again if it loses a deadlock (nothing of it was kept then)."""
    wanted: dict[int, list[Rank]] = defaultdict(list)
    for rank in plan.ranks:
        wanted[rank.node_pk].append(rank)
    with transaction.atomic():
        # The one lock order (market.services.locks): the job, its bids, the nodes by id (no deadlock
        # between two placements), then the owner's credit. A clearing locks its bidders' jobs before
        # their bids too, so it waits for this placement or this placement waits for it, never both.
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.status != JobStatus.PLANNING:
            return []
        lock_job_bids(job)
        nodes = {node.pk: node for node in Node.objects.select_for_update().filter(pk__in=wanted).order_by("pk")}
        if plan.price_per_hour:  # the balance may have changed since the launch
            try:
                # Under the owner's credit lock, counting what the owner's other queued jobs and bids
                # hold: a placement racing a launch or a bid can't both fit in one balance.
                lock_credit(job.owner)
                committed = commitments(job.owner).total(without_job=job.pk)
                check_hold(job.owner, plan.price_per_hour, committed=committed)
            except HoldRefused as error:
                lifecycle.fail(job, error.text, now=now)
                return []
        free = free_chips(nodes.values())
        for node_id, ranks in wanted.items():
            if node_id not in nodes or free.get(node_id, 0) < len(ranks):
                raise CapacityChanged(f"node {node_id} no longer has {len(ranks)} free chip(s)")
        lifecycle.place(job, plan, now)
        held = [new_allocation(job, nodes[node_id], ranks, now) for node_id, ranks in wanted.items()]
        queue_start_commands(job, plan, nodes, now)
        end_job_reservations(job, now)  # from now its allocations bill the chips its bids won
        if job.spot:
            spot.sync_bids_with_plan(job, plan, now)
    return held


def _model_files_stored(job: Job, now) -> bool:
    """Before the first placement of a Hub model, its cached snapshot goes to object storage (once; slow
    for a big model, so outside any transaction). When storage fails the job waits and is planned again."""
    try:
        source = resolve_model_source(job.model_name)
    except ModelUnavailable:
        return True  # the launch below fails the job, saying why
    try:
        store_hub_snapshot(source)
    except StorageError as error:
        reason = StoredText(
            gettext_noop("Waiting for storage: %(model)s's files can't be stored (%(error)s)"),
            model=source.reference,
            error=str(error),
        )
        lifecycle.wait_for_chips(job.pk, reason, now)
        return False
    return True


def new_allocation(job: Job, node: Node, ranks: list[Rank], now) -> Allocation:
    mode = AllocationMode.SPOT if any(rank.is_spot for rank in ranks) else AllocationMode.ON_DEMAND
    return Allocation.objects.create(
        job=job,
        node=node,
        chip_type=node.pool.chip_type,
        chips=len(ranks),
        mode=mode,
        epoch=job.epoch,
        started_at=now,
        billed_through=now,
    )


def queue_start_commands(job: Job, plan: Plan, nodes: dict[int, Node], now, only_island: int | None = None) -> None:
    """START commands for the plan's ranks (or one island's), one per node."""
    launches = rank_launches(job, plan, nodes, only_island)
    by_node: dict[int, list[dict]] = defaultdict(list)
    for node_id, launch in launches:
        by_node[node_id].append(launch.as_dict())
    for node_id, ranks in by_node.items():
        commands.queue_for_node(node_id, job, CommandType.START, {"ranks": ranks}, now)


def rank_launches(
    job: Job, plan: Plan, nodes: dict[int, Node], only_island: int | None = None
) -> list[tuple[int, RankLaunch]]:
    """One RankLaunch per rank of the plan, in rank order: one world, or one per island of a run of islands
    (each its own DeepSpeed world and rendezvous, its ranks numbered from 0, `island` saying where it fits);
    `only_island`: that island's alone (one joining a running job)."""
    model = launch_model(job)
    if plan.bridge is None:
        worlds = [(list(range(plan.world_size)), None)]
    else:
        islands = plan.islands()
        worlds = [
            (island["ranks"], island_launch(job, plan, nodes, island, islands))
            for island in islands
            if only_island is None or island["index"] == only_island
        ]
    launches = []
    for numbers, island in worlds:
        launches += _world_launches(job, plan, nodes, model, [plan.ranks[n] for n in numbers], island)
    if only_island is not None:  # joining a run: its state comes live from a healthy island, not a checkpoint
        launches = [
            (node_id, dataclasses.replace(launch, resume_from=None, island={**launch.island, "joining": True}))
            for node_id, launch in launches
        ]
    # Each host gets a grant for its own placement's objects, never the store's credentials (#28).
    return [(node_id, with_grant(job, nodes[node_id], launch)) for node_id, launch in launches]


def _world_launches(
    job: Job, plan: Plan, nodes: dict[int, Node], model: dict, ranks: list[Rank], island: IslandLaunch | None
) -> list[tuple[int, RankLaunch]]:
    """The launches of one DeepSpeed world: the whole job's, or one island's."""
    master = nodes[ranks[0].node_pk]
    micro_batches = [rank.micro_batch for rank in ranks]
    device_index: dict[int, int] = defaultdict(int)
    settings_of_job = job_hyperparameters(job)
    launches = []
    for index, rank in enumerate(ranks):
        node = nodes[rank.node_pk]
        device = "cpu" if node.simulated else f"{_device_type(node)}:{device_index[node.pk]}"
        device_index[node.pk] += 1
        launches.append(
            (
                node.pk,
                RankLaunch(
                    job_id=job.pk,
                    epoch=job.epoch,
                    rank=index,
                    world_size=len(ranks),
                    master_addr=master.address or "127.0.0.1",
                    master_port=master_port(job, island.index if island else None),
                    model=model,
                    dataset=dataset_location(job),
                    eval_dataset=job.eval_dataset_upload.location if job.eval_dataset_upload_id else None,
                    eval_fraction=job.eval_fraction,
                    eval_every=job.eval_every,
                    micro_batches=micro_batches,
                    max_steps=job.max_steps,
                    zero_stage=plan.zero_stage,
                    run_dir=str(settings.RUNS_ROOT / f"job-{job.pk}" / f"epoch-{job.epoch}"),
                    checkpoint_dir=stored(checkpoint_prefix(job)),
                    resume_from=resume_point(job),
                    checkpoint_every=settings_of_job.checkpoint_every or checkpoint_interval(job),
                    learning_rate=settings_of_job.learning_rate,
                    hyperparameters=settings_of_job.as_dict(),
                    device=device,
                    paced_tokens_per_s=rank.paced_tokens_per_s if node.simulated else None,
                    chip_type=rank.chip,
                    seed=job.pk if settings_of_job.seed is None else settings_of_job.seed,
                    island=island.as_dict() if island else None,
                    # Only the rank that logs the run (hosts/runtime/tracking.py) gets the W&B/MLflow secrets.
                    tracking=launch_tracking(job.tracking) if index == 0 and not (island and island.index) else None,
                    serve=engine_launch(job, node, device, model) if job.deployment_id else None,
                ),
            )
        )
    return launches


def island_launch(job: Job, plan: Plan, nodes: dict[int, Node], island: dict, islands: list[dict]) -> IslandLaunch:
    """Where one island fits in the run: its number, every island's batch, the job's Lighthouse, its leader."""
    leader = nodes[plan.ranks[island["ranks"][0]].node_pk]
    bridge = plan.bridge
    gone = {int(index) for index, figures in (job.island_stats or {}).items() if figures.get("left")}
    return IslandLaunch(
        index=island["index"],
        batches={str(other["index"]): other["batch"] for other in islands if other["index"] not in gone},
        lighthouse=lighthouse_of(job),
        address=leader.address or "127.0.0.1",
        first_rank=island["ranks"][0],
        stack=island["island"],
        mode=bridge.mode,
        sync_every=bridge.sync_every,
        overlap=bridge.mode == SYNC_DILOCO,  # the platform overlaps every diloco run's syncs with training
    )


def _device_type(node: Node) -> str:
    """cuda, npu, mlu or xla: the torch device type of the node's real chips."""
    chip_type = node.pool.chip_type
    return stack_of_chip(chip_type.slug, chip_type.software_stack).device_type


def with_grant(job: Job, node: Node, launch: RankLaunch) -> RankLaunch:
    return dataclasses.replace(launch, storage_grant=issue_grant(job, node, launch))


def launch_model(job: Job) -> dict:
    """The launch file's `model`: the planner's spec plus where the network comes from and how it trains."""
    source = resolve_model_source(job.model_name)
    return {
        **model_spec(JobSpec.of_job(job), source).as_dict(),
        "config": source.config,
        "path": source.location,  # store:models/..., store:hub/... or store:checkpoints/...; None: from the config
        **({"folder": source.store_folder} if source.store_folder else {}),  # job:<id>: model/ inside that tree
        "lora": lora_settings(job.lora) if job.mode == LORA else None,
        "gradient_checkpointing": job.gradient_checkpointing,
    }


def master_port(job: Job, island: int | None = None) -> int:
    """A rendezvous port that differs between jobs, between placements of one job and between its islands."""
    key = f"{job.pk}:{job.epoch}" if island is None else f"{job.pk}:{job.epoch}:island-{island}"
    return settings.RENDEZVOUS_PORT_BASE + zlib.crc32(key.encode()) % settings.RENDEZVOUS_PORT_SPAN


def checkpoint_prefix(job: Job) -> str:
    """Where the job's checkpoints are kept in the platform's store: `<prefix>/step-<n>/` trees."""
    return job_checkpoints(job.pk)


def resume_point(job: Job) -> str | None:
    """The checkpoint the next placement resumes from: the job's latest, only ever one of its own trees; a
    continuation without checkpoints of its own starts from its start checkpoint (`start_checkpoint_key`)."""
    key = own_checkpoint_key(job, job.latest_checkpoint) or start_checkpoint_key(job)
    return stored(key) if key else None


def start_checkpoint_key(job: Job) -> str | None:
    """A continuation's start checkpoint: a checkpoint tree of the job it continues, that job its owner's too;
    anything else is never a resume point (None)."""
    key, previous = job.start_checkpoint, job.continued_from
    if not key or previous is None or previous.owner_id != job.owner_id:
        return None
    return key if is_own_checkpoint(previous.pk, key) else None


def checkpoint_interval(job: Job) -> int:
    return max(10, min(200, job.max_steps // 10))


def dataset_location(job: Job) -> str:
    """ "synthetic", or an upload's stored file: store:datasets/<owner>/<uuid>/data.<ext>."""
    return job.dataset_upload.location if job.dataset_upload_id else job.dataset
