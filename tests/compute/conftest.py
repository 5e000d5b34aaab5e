"""Fixtures for the compute side of the platform: enrolled nodes, node tokens, a placed job."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.choices import JobStatus
from fleet.models import Job, Pool
from kernel.planner import Plan
from workers.models import EnrollmentToken
from workers.services.enrollment import enroll_node


@pytest.fixture
def enroll(catalog):
    """Enroll a simulated node of a chip type; returns (node, node token)."""

    def make(hostname: str, chip: str = "rtx-4090", chips: int = 1, spot: bool = False):
        pool = Pool.objects.get(chip_type__slug=chip)
        _, raw = EnrollmentToken.issue(pool, chips=chips)
        enrolled = enroll_node(
            enrollment_token=raw,
            hostname=hostname,
            chip_type=chip,
            chips=chips,
            simulated=True,
            spot_eligible=spot,
            address="127.0.0.1",
        )
        return enrolled.node, enrolled.token

    return make


@pytest.fixture
def agent_api():
    def client(token: str) -> APIClient:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return api

    return client


def hand_plan(*nodes_and_batches, **fields) -> Plan:
    """A plan as the planner would make it, placing one rank per (node, micro-batch); `fields` set
    its estimates (a price, a global batch)."""
    return Plan.from_dict(
        {
            "zero_stage": 0,
            "ranks": [
                {
                    "chip": node.pool.chip_type.slug,
                    "node_id": node.pk,
                    "hostname": node.hostname,
                    "micro_batch": batch,
                    "mode": "on_demand",
                    "tokens_per_s": 1000.0,
                    "simulated": True,
                    "paced_tokens_per_s": 1000.0,
                }
                for node, batch in nodes_and_batches
            ],
            **fields,
        }
    )


@pytest.fixture
def planning_job(alice):
    def make(**fields) -> Job:
        defaults = {
            "model_name": "llama-tiny",
            "per_device_batch_size": 4,
            "max_steps": 10,
            "max_budget_per_hour": 28_000_000,
            "status": JobStatus.PLANNING,
        }
        return Job.objects.create(owner=alice, **{**defaults, **fields})

    return make
