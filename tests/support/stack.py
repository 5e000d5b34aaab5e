"""The whole platform around pytest-django's live server: a real Celery worker with beat, and
real node agents (simulated chips) that train with the real runtime.

The worker and agents are subprocesses; they reach the test database by its real name, so the
tests that use this stack run with `transaction=True` (committed data).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from fleet.models import Pool
from kernel.protocol import is_storage_credential
from portal.celery import app as celery_app
from portal.task_routes import planning_queue
from workers.models import EnrollmentToken

REPO = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Stack:
    """Handles to the running worker and agents, and a way to wait for the database to agree."""

    def __init__(self, url: str, root: Path, env: dict[str, str]):
        self.url, self.root, self.env = url, root, env
        self.processes: dict[str, subprocess.Popen] = {}

    def start(
        self, name: str, args: list[str], env: dict[str, str] | None = None, base: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """`args` run by this Python, with `base` (default: the platform's environment) and `env` over it."""
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO,
            env={**(self.env if base is None else base), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def add_agent(self, hostname: str, chip: str, chips: int = 1, spot: bool = False) -> subprocess.Popen:
        """Start a simulated agent with a single-use token approving its chips, passed in its environment."""
        pool = Pool.objects.get(chip_type__slug=chip)
        _, raw = EnrollmentToken.issue(pool, chips=chips, name=f"test {hostname}")
        args = [
            "-m",
            "hosts.agent",
            "--platform",
            self.url,
            "--hostname",
            hostname,
            "--simulate",
            f"{chip}:{chips}",
            "--data-dir",
            str(self.root / "agents" / hostname),
        ]
        env = {"STARVERSE_ENROLLMENT_TOKEN": raw}
        return self.start(f"agent-{hostname}", [*args, "--spot"] if spot else args, env=env, base=self.host_env())

    def host_env(self) -> dict[str, str]:
        """What a compute host is given: no store credentials (its ranks get storage grants, #28)."""
        return {name: value for name, value in self.env.items() if not is_storage_credential(name)}

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, sig)
            process.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.kill(name, signal.SIGTERM)

    def environment_of(self, name: str) -> dict[str, str]:
        """What a running process was started with (Linux: /proc/<pid>/environ)."""
        raw = Path(f"/proc/{self.processes[name].pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"===== {name}\n{self.log(name)[-4000:]}" for name in self.processes)


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    stack: Stack | None = None,
    explain: Callable[[], str] | None = None,
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.5)
    details = "\n".join(filter(None, [explain() if explain else "", stack.logs() if stack else ""]))
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{details}")


@contextmanager
def platform_stack(live_server, settings, tmp_path: Path, islands: bool = False) -> Iterator[Stack]:
    """Worker + beat on a private queue (and its planning queue), run folders under tmp_path.

    `islands`: the platform runs its torchft Lighthouses (`manage.py run_lighthouses`), so a plan across
    stacks trains as islands; without, plans stay on one backend as on a platform without torchft.

    The in-process producer sends to the private queues too: the default queue is swapped below, and
    planning tasks are routed to `<default queue>.planning` whatever the default is when they are sent.
    Datasets, models and checkpoints go to the run's object store: the worker inherits STORAGE_URL and the
    AWS_* variables (tests/support/plugins/stores.py) with os.environ; the agents get neither, and their ranks reach
    the store through the storage grants in their launches, as on hosts that are third parties.
    """
    queue = f"test-{uuid.uuid4().hex[:8]}"
    runs = tmp_path / "runs"
    settings.RUNS_ROOT = runs
    previous_queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = queue
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "CELERY_QUEUE": queue,
        "RECONCILE_SECONDS": "1",
        "RUNS_ROOT": str(runs),
        "STARVERSE_DATA_DIR": str(tmp_path / "data"),
        "AGENT_HEARTBEAT_DEADLINE_S": str(settings.AGENT_HEARTBEAT_DEADLINE_S),
        "SIMULATION_SLOWDOWN": str(settings.SIMULATION_SLOWDOWN),
        "PYTHONUNBUFFERED": "1",
    }
    if not islands:
        settings.LIGHTHOUSE_PROGRAM = env["LIGHTHOUSE_PROGRAM"] = ""
    stack = Stack(live_server.url, tmp_path, env)
    if islands:
        stack.start("lighthouses", ["manage.py", "run_lighthouses", "--interval", "0.5"])
    stack.start(
        "worker",
        [
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-B",
            "-Q",
            f"{queue},{planning_queue(queue)}",  # the meter's queue and the planning queue (portal.task_routes)
            "--concurrency",
            "1",
            "--loglevel",
            "INFO",
            "--hostname",
            f"{queue}@%h",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
    )
    try:
        yield stack
    finally:
        stack.stop_all()
        celery_app.conf.task_default_queue = previous_queue
