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
        for index, launch in enumerate(self.launches):
            self.procs.append(self._spawn(index, launch))
        return self

    def _spawn(self, index: int, launch: RankLaunch) -> subprocess.Popen:
        """Start launch `index` (its rank in a single world; its place in the list with islands)."""
        config = self.workdir / f"launch-{index}.json"
        with private_file(config) as handle:
            handle.write(json.dumps(dataclasses.asdict(launch)))
        env = {**os.environ, **self._dist_env(launch), **self.env}
        if self.separate_hosts:
            env["LOCAL_RANK"] = "0"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        out = private_file(self.stdout_path(index))  # owned by the child
        err = private_file(self.stderr_path(index))
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

    def stdout_path(self, index: int) -> Path:
        return self.workdir / f"rank-{index}.out"

    def stderr_path(self, index: int) -> Path:
        return self.workdir / f"rank-{index}.err"

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

    def events(self, index: int) -> list[dict]:
        """The JSON-lines events launch `index` (a single world: rank `index`) has printed so far."""
        path = self.stdout_path(index)
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]

    def stderr_tail(self, lines: int = 15) -> str:
        tails = []
        for index, launch in enumerate(self.launches):
            path = self.stderr_path(index)
            text = path.read_text() if path.exists() else ""
            where = f"island {launch.island['index']} rank {launch.rank}" if launch.island else f"rank {launch.rank}"
            tails.append(f"--- {where} stderr ---\n" + "\n".join(text.splitlines()[-lines:]))
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


def island_launches(islands: list[list[int]], run_dir: Path, lighthouse: str, island: dict | None = None, **fields):
    """The launches of a local run of islands: `islands[i]` is island i's micro-batches.

    Each island is its own DeepSpeed world (its own rendezvous port); `island` fills or overrides
    IslandLaunch fields (mode, sync_every, ...); `fields` RankLaunch fields, as in `job_launches`.
    """
    batches = {str(index): sum(micro) for index, micro in enumerate(islands)}
    launches = []
    for index, micro in enumerate(islands):
        spec = {"index": index, "batches": batches, "lighthouse": lighthouse, "address": "127.0.0.1", **(island or {})}
        launches += job_launches(micro, run_dir, island=spec, **fields)
    return launches


class Lighthouse:
    """torchft's Lighthouse for one local run (its `torchft_lighthouse` program), on a free port."""

    def __init__(self, workdir: Path, join_timeout_ms: int = 30_000, heartbeat_timeout_ms: int = 2000) -> None:
        self.port = free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        self.workdir = Path(workdir)
        self.args = [
            str(Path(sys.executable).with_name("torchft_lighthouse")),
            "--min_replicas=1",
            f"--join_timeout_ms={join_timeout_ms}",
            f"--heartbeat_timeout_ms={heartbeat_timeout_ms}",
            "--quorum_tick_ms=50",
            f"--bind=127.0.0.1:{self.port}",
        ]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Lighthouse:
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = private_file(self.workdir / "lighthouse.log")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # listening: the islands' Managers can connect
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"torchft_lighthouse did not listen on port {self.port}")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
