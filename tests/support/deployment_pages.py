"""Deployments for the page tests: a finished job whose trained model can be deployed (`job:<id>`), and a
deployment with replica jobs written directly (no planner, no agent)."""

from __future__ import annotations

import json
from pathlib import Path

from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Deployment, Job
from kernel.modelspecs import CATALOG
from tests.support.portal_pages import PLAN, make_job, rank
from tests.support.stored import stored_checkpoint
from workers.models import JobCheckpoint


def trained_job(owner, scratch: Path, name: str = "tiny chat run") -> Job:
    """A succeeded job whose last checkpoint holds an exported model/ (what `job:<id>` serves)."""
    job = make_job(owner, name=name, status=JobStatus.SUCCEEDED, step=20, max_steps=20, finished_at=timezone.now())
    config = json.dumps(dict(CATALOG["llama-tiny"].config)).encode()
    tree = {"meta.json": b"{}", "model/config.json": config, "model/model.safetensors": b"w" * 64}
    path = stored_checkpoint(job.pk, 20, tree, scratch)
    JobCheckpoint.objects.create(job=job, epoch=1, step=20, key=path.removeprefix("store:"), created_at=timezone.now())
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=path, latest_checkpoint_step=20)
    job.refresh_from_db()
    return job


def make_deployment(owner, **fields) -> Deployment:
    defaults = {"name": "tiny-chat", "model_name": "job:1", "max_budget_per_hour": 10_000_000}
    return Deployment.objects.create(owner=owner, **{**defaults, **fields})


def replica_plan(chip: str = "tpu-v5e", hostname: str = "sim-tpu-v5e-01", simulated: bool = True) -> dict:
    """A one-rank plan: where a replica runs."""
    return {
        **PLAN,
        "world_size": 1,
        "chip_counts": {chip: {"on_demand": 1}},
        "ranks": [rank(chip, hostname, 1, 0.0, simulated)],
    }


def make_replica(deployment: Deployment, serving: dict, **fields) -> Job:
    """A replica job of the deployment, running with its engine's report `serving` unless told otherwise."""
    defaults = {
        "name": f"{deployment.name} (replica)",
        "status": JobStatus.RUNNING,
        "epoch": 1,
        "max_steps": 1,
        "per_device_batch_size": 1,
        "plan": replica_plan(),
        "started_at": timezone.now(),
    }
    job = make_job(deployment.owner, deployment=deployment, model_name=deployment.model_name, **{**defaults, **fields})
    job.serving = {"epoch": job.epoch, **serving}
    job.save(update_fields=["serving"])
    return job
