"""The torchft Lighthouse of every running job of islands, run by the platform (docs/ISLANDS.md).

A run of islands needs one Lighthouse: it decides at every sync which islands are in the quorum. It
lives with the platform, not on a compute host, so any island may be reclaimed without taking the
others' coordinator with it. `run_lighthouses` (a process of `make run`, like the Celery workers)
keeps one `torchft_lighthouse` per job that needs one, on a port derived from the job (the same for
all its placements, so an island that joins later finds it), and stops it when the job ends.

Ranks reach it at LIGHTHOUSE_HOST, or, when that is blank, at the platform's host as their agent
reaches the platform (kernel.protocol.lighthouse_address).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import zlib
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings

from fleet.choices import JobStatus
from fleet.models import Job

log = logging.getLogger(__name__)

PORT_SPAN = 1000
RUNNING = (JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.MIGRATING)
# How long a quorum waits for an island that heartbeats but hasn't asked to join yet. In diloco the islands
# reach a sync up to H x their step-time spread apart, and one left out must heal, losing its H steps: so
# the wait is long (a dead island stops heartbeating and is dropped after HEARTBEAT_TIMEOUT_MS anyway).
JOIN_TIMEOUT_MS = 30_000
HEARTBEAT_TIMEOUT_MS = 5000  # an island silent this long is out of the next quorum


def islands_enabled() -> bool:
    """Whether this platform can run islands: it has the Lighthouse program."""
    return bool(settings.LIGHTHOUSE_PROGRAM) and Path(settings.LIGHTHOUSE_PROGRAM).exists()


def lighthouse_port(job_id: int) -> int:
    return settings.LIGHTHOUSE_PORT_BASE + zlib.crc32(f"lighthouse:{job_id}".encode()) % PORT_SPAN


def lighthouse_of(job: Job) -> str:
    """The address a job's ranks are given: "http://host:port", or ":port" on the platform's host."""
    port = lighthouse_port(job.pk)
    host = settings.LIGHTHOUSE_HOST
    return f"http://{host}:{port}" if host else f":{port}"


def wanted() -> dict[int, int]:
    """{job id: port} of the jobs whose islands need a Lighthouse now."""
    jobs = Job.objects.filter(status__in=RUNNING).only("pk", "plan")
    return {job.pk: lighthouse_port(job.pk) for job in jobs if job.plan is not None and job.plan.bridge is not None}


class Keeper:
    """The Lighthouse processes of this platform, one per job that needs one."""

    def __init__(self, program: str, log_dir: Path) -> None:
        self.program, self.log_dir = program, Path(log_dir)
        self.running: dict[int, subprocess.Popen] = {}

    def command(self, port: int) -> list[str]:
        return [
            self.program,
            "--min_replicas=1",
            f"--join_timeout_ms={JOIN_TIMEOUT_MS}",
            f"--heartbeat_timeout_ms={HEARTBEAT_TIMEOUT_MS}",
            "--quorum_tick_ms=100",
            f"--bind=[::]:{port}",
        ]

    def sync(self, jobs: Mapping[int, int]) -> None:
        """Start the missing (and the dead), stop those of jobs that no longer need one."""
        for job_id in [job_id for job_id in self.running if job_id not in jobs]:
            self.stop(job_id)
        for job_id, port in jobs.items():
            proc = self.running.get(job_id)
            if proc is None or proc.poll() is not None:
                self.start(job_id, port)

    def start(self, job_id: int, port: int) -> None:
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.log_dir / f"lighthouse-job-{job_id}.log", "ab") as out:
            self.running[job_id] = subprocess.Popen(
                self.command(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        log.info("lighthouse for job %s on port %s", job_id, port)

    def stop(self, job_id: int) -> None:
        proc = self.running.pop(job_id)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.info("lighthouse for job %s stopped", job_id)

    def close(self) -> None:
        for job_id in list(self.running):
            self.stop(job_id)
