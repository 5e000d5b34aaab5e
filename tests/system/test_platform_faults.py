"""`make run` keeps running: kill -9 web, the Celery worker, beat, a demo agent and Redis under a job.

The platform is started the way `make run` starts it (`python -m launcher run`), against the
test database (so this test runs with committed data), with its own embedded Redis, data dir and
ports and the demo fleet on. A job trains on the demo fleet while each kind of process is killed
in turn with SIGKILL; after each kill the platform answers HTTP again within 10 s, and the killed
process is back. At the end the job has succeeded, every allocation is billed through its last
whole second exactly once at the exact price integral, and the ledger audits clean.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from django.utils import timezone

from billing.services.ledger import audit_ledger
from billing.services.meter import billing_mark
from billing.services.reconciliation import differences
from fleet.choices import AgentStatus, JobStatus, MigrationReason
from fleet.models import Allocation, Job, Node
from launcher.stores import free_port
from portal.models import ApiToken
from tests.support.stack import REPO, wait_until
from tests.support.stack import test_database_url as database_url
from workers.models import JobMigration

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BACK_WITHIN_S = 10.0
STARTED = re.compile(r"\| (?P<name>[\w.-]+) started \(pid (?P<pid>\d+)\)")


class Platform:
    """`python -m launcher run` as a subprocess; its output kept in a file and parsed for pids."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "platform.log"
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "STARVERSE_DATA_DIR": str(self.root / "data"),
            "PORT": str(self.port),
            "AGENT_PORT": str(free_port()),  # the default, PORT + 1, may be any other program's ephemeral port
            "STARVERSE_REDIS_PORT": str(free_port()),
            "STARVERSE_DEMO_FLEET": "1",
            "PYTHONUNBUFFERED": "1",
        }
        for variable in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_QUEUE"):  # its own embedded Redis and queues
            env.pop(variable, None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "run"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.log_path, "w") as log:
            for line in self.process.stdout:
                self.lines.append(line)
                log.write(line)
                log.flush()

    def text(self) -> str:
        return "".join(self.lines)

    def pid_of(self, name: str) -> int:
        """The pid of the latest start of `name` (the stores' first start is not announced: read it)."""
        pids = [int(m["pid"]) for m in STARTED.finditer(self.text()) if m["name"] == name]
        if pids:
            return pids[-1]
        if name == "redis":
            return int((self.root / "data" / "redis" / "redis.pid").read_text().split()[0])
        raise AssertionError(f"no pid for {name} in:\n{self.text()[-3000:]}")

    def starts(self, name: str) -> int:
        return sum(1 for m in STARTED.finditer(self.text()) if m["name"] == name)

    def answers(self) -> bool:
        """The API answers a plain GET (a 200; not a 5xx, not a refused connection)."""
        try:
            return httpx.get(f"{self.url}/api/v1/chips/", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        family = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=90)
        finally:
            _, alive = psutil.wait_procs(family, timeout=10)
            for leftover in alive:  # reported below; never leave them running
                leftover.kill()
        assert not alive, f"left running after SIGTERM: {alive}"

    def tail(self) -> str:
        return self.text()[-6000:]


@pytest.fixture
def launched_platform(transactional_db, tmp_path: Path) -> Iterator[Platform]:
    running = Platform(tmp_path)
    running.start()
    try:
        wait_until(
            lambda: "Starverse is running at" in running.text(), 240, "the platform to start", explain=running.tail
        )
        yield running
    finally:
        running.stop()


def job_timeline(job_id: int) -> str:
    job = Job.objects.get(pk=job_id)
    lines = [f"job {job_id}: {job.status} step {job.step} epoch {job.epoch}: {job.status_reason}"]
    lines += [f"  {e.created_at:%H:%M:%S.%f} e{e.epoch} {e.kind}: {e.message}" for e in job.events.all()]
    return "\n".join(lines)


def kill_and_time_recovery(launched_platform: Platform, name: str) -> float:
    """SIGKILL the process (its leader only, as `kill -9 PID` does); seconds until the API answers again."""
    starts = launched_platform.starts(name)
    os.kill(launched_platform.pid_of(name), signal.SIGKILL)
    killed = time.monotonic()
    wait_until(
        launched_platform.answers, 60, f"the platform to answer after killing {name}", explain=launched_platform.tail
    )
    back = time.monotonic() - killed
    wait_until(
        lambda: launched_platform.starts(name) > starts, 60, f"{name} to be restarted", explain=launched_platform.tail
    )
    return back


def assert_billed_exactly_once(job: Job) -> None:
    """Every allocation: billed through its last whole second at the exact integral; each billing line's
    Charge rows hold its allocations' chip-seconds once each and their charged totals."""
    allocations = Allocation.objects.filter(job=job)
    assert allocations.exists()
    for allocation in allocations:
        assert allocation.billed_through == billing_mark(allocation.started_at, allocation.ended_at)
    assert list(differences(timezone.now(), timedelta(0), allocations)) == []


def test_killing_each_kind_of_process_leaves_the_platform_serving_and_the_job_finishing_billed_once(
    launched_platform: Platform, make_user, fund
):
    alice = make_user("alice")
    fund(alice, "1000")
    _, raw = ApiToken.issue(alice)
    api = httpx.Client(base_url=launched_platform.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30)
    wait_until(
        lambda: Node.objects.filter(agent_status=AgentStatus.ONLINE).count() == 4,
        180,
        "the demo fleet to enroll",
        explain=launched_platform.tail,
    )
    spec = {"model": "llama-tiny", "dataset": "synthetic", "per_device_batch_size": 4, "max_steps": 300}
    submitted = api.post("/api/v1/jobs/", json={**spec, "policy": "cost-performance", "max_budget": "100"})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    wait_until(
        lambda: Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, step__gte=5).exists(),
        240,
        "the job to train",
        explain=lambda: job_timeline(job_id) + "\n" + launched_platform.tail(),
    )
    agent = Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).first().node.hostname

    recovery = {}
    for name in ("web", "worker", "beat", agent, "redis"):
        recovery[name] = kill_and_time_recovery(launched_platform, name)
        assert (
            not Job.objects.filter(pk=job_id, status__in=JobStatus.finished())
            .exclude(status=JobStatus.SUCCEEDED)
            .exists()
        ), job_timeline(job_id)
        time.sleep(2)  # let the platform settle between faults
    print(f"\nanswering again after each kill: { ({k: round(v, 1) for k, v in recovery.items()}) }")
    assert all(seconds <= BACK_WITHIN_S for seconds in recovery.values()), recovery

    job = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=JobStatus.finished()).first(),
        600,
        "the job to finish",
        explain=lambda: job_timeline(job_id) + "\n" + launched_platform.tail(),
    )
    assert job.status == JobStatus.SUCCEEDED, job_timeline(job_id)
    # The killed agent's ranks died with it (lost or restarted node alike): one world resumed from its
    # checkpoint; a run of islands (the demo fleet's stacks, where torchft is installed) let that island
    # leave and trained on with the others.
    moved = "island_left" if job.plan.bridge is not None else "resumed"
    assert JobMigration.objects.filter(job=job, reason=MigrationReason.LOST_NODE, status=moved).exists()
    wait_until(
        lambda: all(
            a.ended_at is not None and a.billed_through == billing_mark(a.started_at, a.ended_at)
            for a in Allocation.objects.filter(job=job)
        ),
        60,
        "the meter's last charges",
        explain=launched_platform.tail,
    )
    launched_platform.stop()
    assert_billed_exactly_once(job)
    assert not audit_ledger()
