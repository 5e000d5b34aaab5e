"""The platform under bench/agents.py: its web tier and agent service as `make run` starts them (gunicorn, and
uvicorn serving portal.asgi, from launcher.processes.platform_processes), and the CPU each one spends."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 180


class Platform:
    """The web tier and the agent service, as `make run` starts them, on a throwaway database."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        from launcher.processes import platform_processes

        self.env, self.log = env, log
        commands = platform_processes(env)
        self.commands = {name: commands[name] for name in ("web", "agents")}
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        out = self.log.open("a")
        for name, command in self.commands.items():
            self.processes[name] = subprocess.Popen(
                shlex.split(command),
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        web, agents = f"http://127.0.0.1:{self.env['PORT']}/healthz", f"{self.agents_url}/healthz"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for url in (web, agents):
            while True:
                try:
                    if httpx.get(url, timeout=5).status_code < 500:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes.values()):
                    raise RuntimeError(f"{url} did not come up; see {self.log}")
                time.sleep(0.5)

    @property
    def agents_url(self) -> str:
        return f"http://127.0.0.1:{self.env['AGENT_PORT']}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.env['PORT']}"

    def cpu_seconds(self) -> dict[str, float]:
        """user+system CPU of each process tree so far (children included: gunicorn's workers)."""
        spent = {}
        for name, process in self.processes.items():
            total = 0.0
            try:
                root = psutil.Process(process.pid)
                for each in [root, *root.children(recursive=True)]:
                    times = each.cpu_times()
                    total += times.user + times.system
            except psutil.Error:
                pass
            spent[name] = total
        return spent

    def stop(self) -> None:
        import signal

        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def database_backend_cpu(url: str, database: str) -> dict[int, float]:
    """CPU seconds of every PostgreSQL backend connected to `database`, by pid."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [database])]
    spent = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            spent[pid] = times.user + times.system
        except psutil.Error:
            pass
    return spent
