"""The fleet under bench/agents.py, seeded through the service layer (sync Django, in the bench's process):
simulated nodes enrolled with jobs of RANKS_PER_JOB ranks on them, users with API tokens, commands queued at a
steady rate, and what the platform ingested afterwards."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass

RANKS_PER_JOB = 20


@dataclass
class Fleet:
    nodes: list[tuple[int, str, int, int, int]]  # (node id, node token, job id, epoch, rank)
    job_ids: list[int]


def setup_django() -> None:
    import logging

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request of 2,000 agents


def user_tokens(count: int) -> list[str]:
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    from portal.models import ApiToken

    tokens = []
    for index in range(count):
        user, _ = get_user_model().objects.get_or_create(username=f"bench-user-{index}", email=f"u{index}@example.com")
        EmailAddress.objects.get_or_create(user=user, email=user.email, defaults={"primary": True, "verified": True})
        tokens.append(ApiToken.issue(user)[1])
    return tokens


def enroll_fleet(size: int, tag: str) -> Fleet:
    """`size` simulated nodes enrolled through the service layer, with jobs of RANKS_PER_JOB ranks on them."""
    from django.contrib.auth import get_user_model

    from fleet.choices import JobStatus
    from fleet.models import Job, Pool
    from kernel.planner.types import Plan
    from workers.models import EnrollmentToken
    from workers.services.enrollment import enroll_node
    from workers.services.placement import allocate

    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=1, max_uses=size)
    enrolled = [
        enroll_node(
            enrollment_token=raw,
            hostname=f"bench-{tag}-{index}",
            chip_type="rtx-4090",
            chips=1,
            simulated=True,
            address="127.0.0.1",
        )
        for index in range(size)
    ]
    owner, _ = get_user_model().objects.get_or_create(username="bench-owner", email="owner@example.com")
    nodes, job_ids = [], []
    for first in range(0, size, RANKS_PER_JOB):
        group = enrolled[first : first + RANKS_PER_JOB]
        job = Job.objects.create(
            owner=owner,
            model_name="llama-tiny",
            per_device_batch_size=4,
            max_steps=1000,
            max_budget_per_hour=28_000_000,
            status=JobStatus.PLANNING,
        )
        ranks = [
            {
                "chip": "rtx-4090",
                "node_id": each.node.pk,
                "hostname": each.node.hostname,
                "micro_batch": 4,
                "mode": "on_demand",
                "tokens_per_s": 1000.0,
                "simulated": True,
                "paced_tokens_per_s": 1000.0,
            }
            for each in group
        ]
        if not allocate(job, Plan.from_dict({"zero_stage": 0, "ranks": ranks})):
            raise RuntimeError(f"job {job.pk} could not be placed on its {len(group)} nodes")
        job.refresh_from_db()
        job_ids.append(job.pk)
        nodes += [(each.node.pk, each.token, job.pk, job.epoch, rank) for rank, each in enumerate(group)]
    return Fleet(nodes, job_ids)


class Queuer(threading.Thread):
    """Queues checkpoint commands to random nodes at a steady rate, as the platform's services do."""

    def __init__(self, fleet: Fleet, per_s: float, queued: dict[int, float]) -> None:
        super().__init__(daemon=True)
        self.fleet, self.per_s, self.queued = fleet, per_s, queued
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from fleet.models import Job
        from kernel.protocol import CommandType
        from workers.services.commands import queue_for_node

        jobs = Job.objects.in_bulk(self.fleet.job_ids)
        next_at = time.monotonic()
        try:
            while not self.stopped.is_set():
                node_id, _, job_id, _, _ = random.choice(self.fleet.nodes)
                started = time.time()
                command = queue_for_node(
                    node_id, jobs[job_id], CommandType.CHECKPOINT, {"reason": "bench"}, timezone.now()
                )
                self.queued[command.pk] = started
                next_at += 1 / self.per_s
                self.stopped.wait(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()


def count_after(fleet: Fleet, deadline_s: int) -> tuple[list[str], int]:
    """(log lines ingested for the fleet's jobs, nodes whose last heartbeat is older than the deadline)."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from fleet.models import Node
    from workers.models import JobLogLine

    try:
        lines = list(JobLogLine.objects.filter(job_id__in=fleet.job_ids).values_list("line", flat=True))
        cutoff = timezone.now() - timedelta(seconds=deadline_s)
        silent = Node.objects.filter(pk__in=[n[0] for n in fleet.nodes], last_heartbeat_at__lt=cutoff).count()
        return lines, silent
    finally:
        connection.close()
