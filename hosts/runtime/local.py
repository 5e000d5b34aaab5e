"""Start a whole job's ranks on this host, as an agent would: for tests and benchmarks.

Each rank is `python -m hosts.runtime --config launch-<r>.json` with the torch.distributed
environment; its stdout (events) and stderr (logs) go to files in the work directory.
Imports neither torch nor Django, so a benchmark driver stays light.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kernel.protocol import RankLaunch

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nobody listens on right now (the rendezvous port of a local job)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def private_file(path: Path):
    """A file opened for writing (truncated) that only its owner can read: a run's logs hold its data."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")


def job_launches(micro_batches: list[int], run_dir: Path, **fields) -> list[RankLaunch]:
    """One RankLaunch per rank of a local job; `fields` fills or overrides RankLaunch fields."""
    port = fields.pop("master_port", None) or free_port()
    base = {
        "job_id": 1,
        "epoch": 1,
        "master_addr": "127.0.0.1",
        "master_port": port,
        "dataset": "synthetic",
        "max_steps": 10,
        "zero_stage": 0,
        "run_dir": str(run_dir),
        "checkpoint_dir": str(run_dir / "checkpoints"),
        **fields,
    }
    world = len(micro_batches)
    return [RankLaunch(rank=r, world_size=world, micro_batches=list(micro_batches), **base) for r in range(world)]


class LocalJob:
    """The rank processes of one job on this host."""

    def __init__(
        self,
        launches: list[RankLaunch],
        workdir: Path,
        env: dict[str, str] | None = None,
        separate_hosts: bool = False,
    ) -> None:
        """`separate_hosts`: each rank acts as the only rank of its own host (LOCAL_RANK 0; give each
        launch its own run_dir), as ranks on hosts that share no disk do."""
        self.launches, self.workdir, self.env = launches, Path(workdir), env or {}
        self.separate_hosts = separate_hosts
        self.procs: list[subprocess.Popen] = []

    def start(self) -> LocalJob:
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for launch in self.launches:
            self.procs.append(self._spawn(launch))
        return self

    def _spawn(self, launch: RankLaunch) -> subprocess.Popen:
        config = self.workdir / f"launch-{launch.rank}.json"
        with private_file(config) as handle:
            handle.write(json.dumps(dataclasses.asdict(launch)))
        env = {**os.environ, **self._dist_env(launch), **self.env}
        if self.separate_hosts:
            env["LOCAL_RANK"] = "0"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        out = private_file(self.stdout_path(launch.rank))  # owned by the child
        err = private_file(self.stderr_path(launch.rank))
        cmd = [sys.executable, "-m", "hosts.runtime", "--config", str(config)]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        out.close()
        err.close()
        return proc

    @staticmethod
    def _dist_env(launch: RankLaunch) -> dict[str, str]:
        return {
            "RANK": str(launch.rank),
            "WORLD_SIZE": str(launch.world_size),
            "LOCAL_RANK": str(launch.rank),
            "MASTER_ADDR": launch.master_addr,
            "MASTER_PORT": str(launch.master_port),
        }

    def stdout_path(self, rank: int) -> Path:
        return self.workdir / f"rank-{rank}.out"

    def stderr_path(self, rank: int) -> Path:
        return self.workdir / f"rank-{rank}.err"

    def wait(self, timeout: float) -> list[int]:
        """Exit codes of all ranks; kills the job and raises TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        try:
            return [proc.wait(timeout=max(0.1, deadline - time.monotonic())) for proc in self.procs]
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"job in {self.workdir} still running after {timeout} s:\n{self.stderr_tail()}"
            ) from None

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def events(self, rank: int) -> list[dict]:
        """The JSON-lines events this rank has printed so far."""
        path = self.stdout_path(rank)
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]

    def stderr_tail(self, lines: int = 15) -> str:
        tails = []
        for launch in self.launches:
            text = self.stderr_path(launch.rank).read_text() if self.stderr_path(launch.rank).exists() else ""
            tails.append(f"--- rank {launch.rank} stderr ---\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(tails)

    def run(self, timeout: float) -> list[int]:
        """Start, wait, and raise with the ranks' stderr if any rank failed."""
        codes = self.start().wait(timeout)
        if any(codes):
            raise RuntimeError(f"ranks exited with {codes}:\n{self.stderr_tail()}")
        return codes


def metrics(events: list[dict]) -> dict[int, dict]:
    """Metric events by step."""
    return {event["step"]: event for event in events if event["event"] == "metric"}
