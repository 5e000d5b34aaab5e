"""One replica's engine as a subprocess: start it, health-check it, stop it, report its state.

The engine runs in a process group of its own (its model process and helpers with it), its output in
`<run>/engine.log`. It is ready when `GET /v1/models` answers and lists its served name (both engines
load the model before they list it); `wait_ready` polls that with a deadline. `stop` sends the group
SIGTERM, then SIGKILL after a grace, and waits until no process of the group is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from hosts.serving.engines import command, environment
from hosts.serving.prepare import PrepareFailed, prepare
from kernel.serving import FAILED, READY, STARTING, STOPPED, EngineLaunch, EngineStatus

READY_TIMEOUT_S = 600.0
POLL_INTERVAL_S = 0.25
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 20
PR_SET_PDEATHSIG = 1


class EngineFailed(RuntimeError):
    """The engine could not start or exited; the message holds its last log lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (zombies not yet reaped count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_me_with_parent() -> None:
    """In a child before exec (Linux): SIGKILL it when the process that started it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class EngineProcess:
    """One engine serving one EngineLaunch on this host."""

    def __init__(self, launch: EngineLaunch, die_with_parent: bool = False):
        launch.check()
        # A replica's engine (hosts/serving/replica.py) must not outlive the replica process when the agent kills
        # it with SIGKILL (the engine has a process group of its own, which the agent's kill doesn't reach).
        self.die_with_parent = die_with_parent
        self._own_run_dir = not launch.run_dir
        if self._own_run_dir:
            launch = dataclasses.replace(launch, run_dir=tempfile.mkdtemp(prefix=f"serving-{launch.deployment_id}-"))
        self.launch = launch
        self.run_dir = Path(launch.run_dir)
        self.log_path = self.run_dir / "engine.log"
        self.process: subprocess.Popen | None = None
        self.state = STARTING
        self.error = ""
        self._temporary: list[Path] = []

    @property
    def url(self) -> str:
        """The engine's OpenAI-compatible base URL."""
        host = "127.0.0.1" if self.launch.host in ("0.0.0.0", "") else self.launch.host
        return f"http://{host}:{self.launch.port}/v1"

    def start(self) -> EngineProcess:
        """Stage and prepare the model (may take long: a download, a merge), then start the engine."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            prepared = prepare(self.launch)
        except (PrepareFailed, OSError) as error:
            return self._fail(str(error))
        self._temporary = prepared.temporary
        argv = command(self.launch, prepared.folder, prepared.adapter)
        (self.run_dir / "engine.json").write_text(json.dumps({"argv": argv, "launch": self.launch.as_dict()}))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=prepared.workdir,
                env=environment(self.launch),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends the model's processes too
                preexec_fn=kill_me_with_parent if self.die_with_parent else None,
            )
        self.state = STARTING
        return self

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """One health check: `/v1/models` answers 200 and lists the served name."""
        try:
            with urllib.request.urlopen(self.url + "/models", timeout=timeout_s) as answer:
                listed = {model.get("id") for model in json.load(answer).get("data", [])}
        except (OSError, ValueError, urllib.error.URLError):
            return False
        return self.launch.served_model_name in listed

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, interval_s: float = POLL_INTERVAL_S) -> EngineProcess:
        """Poll until the engine is ready; EngineFailed if it exits or isn't ready within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.state == STARTING:
            if self.poll() != STARTING:
                break
            if self.healthy():
                self.state = READY
                break
            if time.monotonic() >= deadline:
                self.stop()
                self._fail(f"not ready within {timeout_s:.0f} s")
                break
            time.sleep(interval_s)
        if self.state != READY:
            raise EngineFailed(self.error or f"the engine is {self.state}")
        return self

    def poll(self) -> str:
        """The state now: a ready or starting engine that exited has failed."""
        if self.process is not None and self.state in (STARTING, READY):
            code = self.process.poll()
            if code is not None:
                self._fail(f"the engine exited with code {code}")
        return self.state

    def stop(self, grace_s: float = STOP_GRACE_S) -> EngineProcess:
        """SIGTERM to the engine's group, SIGKILL after `grace_s`; returns once the group is gone."""
        if self.process is not None:
            pgid = self.process.pid
            self._signal(pgid, signal.SIGTERM)
            if not self._wait_gone(pgid, grace_s):
                self._signal(pgid, signal.SIGKILL)
                self._wait_gone(pgid, 10.0)
        for path in self._temporary + ([self.run_dir] if self._own_run_dir and self.state != FAILED else []):
            shutil.rmtree(path, ignore_errors=True)
        if self.state != FAILED:
            self.state = STOPPED
        return self

    def status(self) -> EngineStatus:
        state = self.poll()
        process = self.process
        return EngineStatus(
            deployment_id=self.launch.deployment_id,
            replica=self.launch.replica,
            state=state,
            engine=self.launch.engine,
            served_model_name=self.launch.served_model_name,
            url=self.url,
            pid=process.pid if process else None,
            simulated=self.launch.simulated,
            device=self.launch.device,
            exit_code=process.returncode if process else None,
            error=self.error,
        )

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _fail(self, reason: str) -> EngineProcess:
        tail = self.log_tail()
        self.error = f"{reason}\n{tail}".strip()
        self.state = FAILED
        return self

    @staticmethod
    def _signal(pgid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    def _wait_gone(self, pgid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is not None:
                self.process.poll()  # reap the leader, so that it doesn't linger as a zombie
            if not group_alive(pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
