"""Helpers for the market hardening tests: online nodes and jobs, made directly in the database."""

from __future__ import annotations

from django.utils import timezone

from fleet.choices import AgentStatus
from fleet.models import Job, Node, Pool
from kernel.money import to_micros
from kernel.spec import JobSpec
from workers.services.lifecycle import submit as submit_job


def online_node(hostname: str, chip: str = "rtx-4090", chips: int = 1, spot: bool = True) -> Node:
    """An enrolled, heartbeating simulated node (the catalog must be seeded)."""
    return Node.objects.create(
        pool=Pool.objects.get(chip_type__slug=chip),
        hostname=hostname,
        chips=chips,
        simulated=True,
        spot_eligible=spot,
        address="127.0.0.1",
        agent_status=AgentStatus.ONLINE,
        last_heartbeat_at=timezone.now(),
        enrolled_at=timezone.now(),
    )


def job_spec(**fields) -> dict:
    return {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 100,
        "max_budget_per_hour": 28_000_000,
        **fields,
    }


def spot_job(owner, bid: str, **fields) -> Job:
    """Submit a spot job (spot chips only) bidding `bid` per chip-hour; it is scheduled as the test's Celery is."""
    spec = job_spec(spot=True, spot_bid_per_hour=to_micros(bid), allow_on_demand=False, **fields)
    return submit_job(owner, JobSpec.from_dict(spec))


def launch_fields(**changes) -> JobSpec:
    """A job spec as the API's serializer hands it to `launch`: one RTX 4090 by default."""
    return JobSpec.from_dict({"chip_counts": {"rtx-4090": 1}, **job_spec(), **changes})
