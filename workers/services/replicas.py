"""A deployment's replicas: each is a job launched through the one launch path, whose one rank serves
(docs/SERVING.md, "Replicas, scaling and billing").

`launch_replica` plans and queues one (its refusals as DeploymentRefused, on the deployment's fields), the
placement gives its rank `engine_launch` (RankLaunch.serve), the host's `serving` reports land in
`record_serving`, and the gateway sends requests to the replicas `serving_deployment` finds (and, through a
cold start, `ready_replicas`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, Job, Node
from kernel.serving import READY, EngineLaunch, default_engine
from kernel.spec import JobSpec
from workers.services import lifecycle
from workers.services.launch import LaunchRefused, launch

LIVE_JOB = ~Q(status__in=JobStatus.finished())


class DeploymentRefused(Exception):
    """A deployment that can't be made or changed: `field` and `code` as in the API's error format."""

    def __init__(self, field: str, code: str, message: str):
        super().__init__(message)
        self.field, self.code = field, code


@dataclass(frozen=True)
class Replica:
    """A ready replica the gateway may send a request to."""

    job_id: int
    url: str  # the engine's OpenAI-compatible base, ".../v1"
    simulated: bool


def replica_spec(deployment: Deployment) -> JobSpec:
    """A replica as a job to plan: one sample, one step (it trains nothing), the deployment's chips and terms."""
    return JobSpec(
        model_name=deployment.model_name,
        per_device_batch_size=1,
        max_steps=1,
        max_budget_per_hour=deployment.max_budget_per_hour,
        policy=deployment.policy,
        name=f"{deployment.name} (replica)",
        chip_counts={deployment.chip: deployment.chips_per_replica} if deployment.chip else None,
        spot=deployment.spot,
        spot_bid_per_hour=deployment.spot_bid_per_hour,
        allow_other_chips=not deployment.chip,
    )


def launch_replica(deployment: Deployment) -> Job:
    """One more replica, through the launch path (its refusals as DeploymentRefused)."""
    try:
        return launch(deployment.owner, replica_spec(deployment), deployment=deployment)
    except LaunchRefused as error:
        raise refused(error) from None


def refused(error: LaunchRefused) -> DeploymentRefused:
    """A replica's launch refusal as the deployment's, on the deployment's field."""
    field = {"max_budget": "max_budget_per_hour", "chip_counts": "chip"}.get(error.field, error.field)
    return DeploymentRefused(field, error.code, str(error))


def engine_launch(job: Job, node: Node, device: str, model: dict) -> dict:
    """`RankLaunch.serve` of a replica's rank on `node` (kernel.serving.EngineLaunch; port 0: the replica picks)."""
    deployment = job.deployment
    return EngineLaunch(
        model=model.get("path") or "",
        model_folder=model.get("folder"),
        served_model_name=deployment.name,
        port=0,
        engine=default_engine(device, node.simulated),
        device="cpu" if node.simulated else device,
        host=node.address or "127.0.0.1",
        max_model_len=deployment.max_model_len,
        simulated=node.simulated,
        chip_type=node.pool.chip_type.slug,
        deployment_id=deployment.pk,
        replica=job.pk,
    ).as_dict()


def record_serving(job: Job, item: dict, now: datetime, node: Node) -> None:
    """A replica's engine state (a `serving` report; call with the job's row locked): a ready replica is
    running, and its deployment is ready."""
    url = item.get("url") or job.serving.get("url", "")  # reports.accept_report checked it is on `node`
    job.serving = {
        "state": item["state"],
        "url": url,
        "engine": item.get("engine") or job.serving.get("engine", ""),
        "simulated": bool(item.get("simulated", job.serving.get("simulated", False))),
        "device": item.get("device") or job.serving.get("device", ""),
        "error": (item.get("error") or "")[-2000:],
        "epoch": job.epoch,
        "at": now.isoformat(),
    }
    job.save(update_fields=["serving", "updated_at"])
    if item["state"] == READY:
        lifecycle.start_running(job, 0, now)
        Deployment.objects.filter(
            pk=job.deployment_id, status__in=[DeploymentStatus.DEPLOYING, DeploymentStatus.IDLE]
        ).update(status=DeploymentStatus.READY, status_reason="", status_reason_text={}, updated_at=now)


def ready_replicas(deployment: Deployment) -> list[Replica]:
    """The replicas answering now: running, their engine ready in the current placement (not draining)."""
    jobs = deployment.replicas.filter(status=JobStatus.RUNNING, cancel_requested_at__isnull=True, serving__state=READY)
    return answering(jobs.values_list("pk", "epoch", "serving"))


def answering(jobs) -> list[Replica]:
    """The replicas among ready jobs, given as (pk, epoch, serving): those whose engine reported in this epoch."""
    return [
        Replica(pk, serving["url"], bool(serving.get("simulated")))
        for pk, epoch, serving in jobs
        if serving.get("epoch") == epoch and serving.get("url")
    ]


# The gateway's one query per request: the caller's live deployment of a name, with its ready replicas' rows
# (ready_replicas' filter) as a JSON list. Written as SQL because on this hot path the ORM's compiling cost
# more than the database's answer: the same as two querysets took ~2.0 ms on the 2-core machine, as one
# subquery 2.1 ms, as this 0.5 ms (docs/SERVING.md, "Latency" under "The gateway").
SERVING_LOOKUP = f"""
    SELECT deployment.*, (
        SELECT json_agg(json_build_array(job.id, job.epoch, job.serving))
        FROM {Job._meta.db_table} job
        WHERE job.deployment_id = deployment.id AND job.status = %(running)s
          AND job.cancel_requested_at IS NULL AND job.serving->>'state' = %(ready)s
    ) AS ready_jobs
    FROM {Deployment._meta.db_table} deployment
    WHERE deployment.owner_id = %(owner)s AND deployment.name = %(name)s AND deployment.status <> %(stopped)s
"""


def serving_deployment(user, name: str) -> tuple[Deployment, list[Replica]] | None:
    """The user's live deployment of that name (what a request's `model` names; one at most, a constraint
    says) and its ready replicas, in one query; None: not theirs, or none."""
    params = {"running": JobStatus.RUNNING, "ready": READY, "owner": user.pk, "name": name}
    for deployment in Deployment.objects.raw(SERVING_LOOKUP, {**params, "stopped": DeploymentStatus.STOPPED}):
        jobs = deployment.ready_jobs
        return deployment, answering(json.loads(jobs) if isinstance(jobs, str) else jobs or [])
    return None


def live_replicas(deployment: Deployment):
    return deployment.replicas.filter(LIVE_JOB)
