"""The portal page tests' launch form, plan and jobs: what a launch posts, a two-chip plan, a job row."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from fleet.choices import AgentStatus
from fleet.models import Job, Node

LAUNCH = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "policy": "cost-performance",
    "max_budget": "28",
    "max_steps": "200",
    "per_device_batch_size": "4",
}


def bring_online(*chips: str) -> None:
    """Seeded nodes start unenrolled; put those of these chip types (or all) online."""
    nodes = Node.objects.filter(pool__chip_type__slug__in=chips) if chips else Node.objects.all()
    nodes.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())


def quote_html(client, **changes) -> str:
    response = client.post(reverse("train_quote"), {**LAUNCH, **changes})
    assert response.status_code == 200
    return response.content.decode()


def launch(client, **changes):
    return client.post(reverse("train"), {**LAUNCH, **changes})


def rank(chip: str, hostname: str, micro_batch: int, tokens_per_s: float, simulated: bool = True) -> dict:
    return {
        "chip": chip,
        "node_id": 1,
        "hostname": hostname,
        "pool": f"{chip}-cn-east-1",
        "micro_batch": micro_batch,
        "mode": "on_demand",
        "tokens_per_s": tokens_per_s,
        "memory_gib": 1.0,
        "simulated": simulated,
    }


PLAN = {
    "policy": "cost-performance",
    "model": "llama-tiny",
    "world_size": 2,
    "chip_counts": {"rtx-4090": {"on_demand": 1}, "tpu-v5e": {"on_demand": 1}},
    "ranks": [
        rank("rtx-4090", "sim-rtx-4090-01", 3, 40_000.0),
        rank("tpu-v5e", "sim-tpu-v5e-01", 5, 60_000.0),
    ],
    "zero_stage": 1,
    "global_batch": 8,
    "tokens_per_step": 512,
    "step_seconds": 0.005,
    "comm_seconds": 0.001,
    "link_gbps": 100,
    "tokens_per_s": 100_000.0,
    "price_per_hour": 4_000_000,
    "price_per_million_tokens": 11_111,
    "eta_seconds": 1.0,
    "total_cost": 1_111,
    "throughput_source": {},
    "baseline": None,
    "speedup_vs_baseline": None,
    "cost_ratio_vs_baseline": None,
}


def make_job(owner, **fields) -> Job:
    defaults = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 200,
        "max_budget_per_hour": 28_000_000,
    }
    return Job.objects.create(owner=owner, **{**defaults, **fields})


def page(client, job: Job, **params) -> str:
    response = client.get(reverse("job", args=[job.pk]), params)
    assert response.status_code == 200
    return response.content.decode()
