"""The platform in the root namespace, node agents on hosts of a bridged test network (tests/support/netns.py).

What crosses the network is what would cross it between real machines: the agents reach the
platform (web server and object storage) only at the bridge address, and ranks on different hosts
reach each other only at their hosts' addresses. PostgreSQL and Redis stay on the root namespace's
loopback, where only the platform's own processes (web server, Celery worker with beat) use them.
The subprocesses reach the test database by its real name, so the tests commit their rows.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from django.db import connection

from fleet.models import Pool
from kernel.protocol import is_storage_credential
from portal.task_routes import planning_queue
from tests.support.netns import BridgeNetwork, Host
from workers.models import EnrollmentToken

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90


def database_url() -> str:
    """The test database, by its real name (pytest-django's test_<name>)."""
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], object], timeout: float, what: str, explain: Callable[[], str] = str):
    """`condition()`'s first truthy value within `timeout` seconds, else fail saying what and why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{explain()}")


class FleetPlatform:
    """Web server and Celery (worker + beat) bound to the bridge address; agents started on hosts."""

    def __init__(self, network: BridgeNetwork, root: Path, env: dict[str, str]) -> None:
        self.network, self.root = network, root
        self.port = free_port(network.address)
        self.url = f"http://{network.address}:{self.port}"
        self.queue = f"fleet-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_QUEUE": self.queue,
            "ALLOWED_HOSTS": network.address,
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.processes: dict[str, subprocess.Popen] = {}

    # -- processes -----------------------------------------------------------------------------
    def _log(self, name: str):
        return open(self.root / f"{name}.log", "w")  # noqa: SIM115 - closed with the process

    def start_platform(self) -> None:
        """gunicorn on the bridge address (threads: agents hold long-polls open) and a worker with beat."""
        web = [
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi:application",
            "--bind",
            f"{self.network.address}:{self.port}",
        ]
        web += ["--workers", "1", "--worker-class", "gthread", "--threads", "24", "--timeout", "60"]
        self._start("web", web + _no_control_socket())
        queues = f"{self.queue},{planning_queue(self.queue)}"
        worker = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-B", "-Q", queues, "--concurrency", "1"]
        worker += ["--loglevel", "INFO", "--hostname", f"{self.queue}@%h", "--schedule", str(self.root / "beat")]
        self._start("worker", worker)
        # The Lighthouse of each run of islands, on the platform's host: ranks reach it at the bridge address.
        self._start("lighthouses", [sys.executable, "manage.py", "run_lighthouses", "--interval", "0.5"])
        wait_until(self._answers, START_TIMEOUT_S, f"the platform to answer at {self.url}", self.logs)

    def _start(self, name: str, argv: list[str]) -> None:
        self.processes[name] = subprocess.Popen(
            argv, cwd=REPO, env=self.env, stdout=self._log(name), stderr=subprocess.STDOUT, start_new_session=True
        )

    def _answers(self) -> bool:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}\n{self.logs()}")
        try:
            return httpx.get(f"{self.url}/api/v1/chips/", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def add_agent(self, host: Host, hostname: str, chip: str = "rtx-4090", env: dict[str, str] | None = None):
        """A simulated agent on `host`, enrolling through the bridge with a single-use token in its environment.

        It declares no address: the platform records the one it sees, which is the host's.
        """
        _, raw = EnrollmentToken.issue(Pool.objects.get(chip_type__slug=chip), chips=1, name=f"fleet {hostname}")
        data_dir = self.root / "hosts" / hostname
        argv = [sys.executable, "-m", "hosts.agent", "--platform", self.url, "--hostname", hostname]
        argv += ["--simulate", f"{chip}:1", "--data-dir", str(data_dir), "--poll-wait", "1"]
        agent_env = {
            **self.env,
            "STARVERSE_ENROLLMENT_TOKEN": raw,
            "STARVERSE_CACHE_DIR": str(data_dir / "cache"),  # each host stages stored inputs on its own disk
            **(env or {}),
        }
        # A compute host has none of these: no database, no broker, and no store credentials (it gets
        # storage grants from the platform, #28).
        dropped = {"DATABASE_URL", "REDIS_URL", "CELERY_QUEUE"} | {n for n in agent_env if is_storage_credential(n)}
        for name in dropped:
            agent_env.pop(name, None)
        name = f"agent-{hostname}"
        self.processes[name] = host.popen(
            argv, cwd=REPO, env=agent_env, stdout=self._log(name), stderr=subprocess.STDOUT
        )
        return self.processes[name]

    def stop(self) -> None:
        """SIGTERM everything (agents first, so they end their ranks), SIGKILL what lingers."""
        names = sorted(self.processes, key=lambda name: not name.startswith("agent-"))
        for name in names:
            process = self.processes[name]
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for name in names:
            process = self.processes[name]
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"===== {name}\n{self.log(name)[-tail:]}" for name in self.processes)


def _no_control_socket() -> list[str]:
    """gunicorn >= 25 opens a control socket in ~/.gunicorn, shared by every local platform."""
    from gunicorn.config import KNOWN_SETTINGS

    return ["--no-control-socket"] if any(s.name == "control_socket_disable" for s in KNOWN_SETTINGS) else []
