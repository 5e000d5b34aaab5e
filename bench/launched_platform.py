"""The platform as `make run` starts it (`python -m launcher run`), for benchmarks: a subprocess in its own
session on free ports, its environment for a throwaway database and data dir, and the tidying after it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 300


def launcher_env(database_url: str, root: Path, tag: str, *, demo_fleet: bool) -> dict[str, str]:
    """The launcher's environment: this database, a data dir under `root`, free ports, the run's Celery queue and
    cache prefix (`tag`); the shared REDIS_URL when set, else the launcher's embedded Redis on a free port."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "STARVERSE_DATA_DIR": str(root / "data"),
        "PORT": str(free_port()),
        "AGENT_PORT": str(free_port()),  # the async agent service, where the launcher has one (default PORT + 1)
        "STARVERSE_DEMO_FLEET": "1" if demo_fleet else "0",
        "CELERY_QUEUE": tag,
        "CACHE_KEY_PREFIX": tag,
        "PYTHONUNBUFFERED": "1",
    }
    if not os.environ.get("REDIS_URL"):
        env["STARVERSE_REDIS_PORT"] = str(free_port())
    return env


def use_its_settings(env: dict[str, str]) -> None:
    """This process's Django (set up later, to seed) reads the launched platform's database and the secret key
    the launcher wrote into its data dir."""
    os.environ["DATABASE_URL"] = env["DATABASE_URL"]
    os.environ["STARVERSE_DATA_DIR"] = env["STARVERSE_DATA_DIR"]


def launcher_command() -> list[str]:
    return [sys.executable, "-m", "launcher", "run"]


class Platform:
    """The launcher as a subprocess in its own session; its output drained to a log file."""

    def __init__(self, root: Path, env: dict[str, str], command: list[str]) -> None:
        self.root, self.env, self.command = root, env, command
        self.url = f"http://127.0.0.1:{env['PORT']}"
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.root / "platform.log", "w") as log:
            for line in self.process.stdout:
                if len(self.lines) < 2000:  # the start-up lines; the rest (a line per request) only in the file
                    self.lines.append(line)
                log.write(line)

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not any("Starverse is running at" in line for line in self.lines):
            if self.process is None or self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the platform did not start:\n" + "".join(self.lines[-60:]))
            time.sleep(0.5)

    def family(self) -> list[psutil.Process]:
        if self.process is None:
            return []
        try:
            leader = psutil.Process(self.process.pid)
            return [leader, *leader.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """SIGTERM as Ctrl-C would (the launcher stops its children and stores), then kill what is left."""
        if self.process is None or self.process.poll() is not None:
            return
        family = self.family()
        self.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=90)
        _, alive = psutil.wait_procs(family, timeout=10)
        for leftover in alive:
            leftover.kill()


def forget_redis_keys(url: str, tag: str) -> int:
    """Delete this run's cache keys and Celery queues from a shared Redis (they all contain `tag`)."""
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"*{tag}*", count=1000))
    if keys:
        client.delete(*keys)
    return len(keys)


def free_port() -> int:
    from launcher._child import free_port

    return free_port()


def close_django_connections() -> None:
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()
