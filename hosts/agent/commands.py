"""Executing platform commands (start, checkpoint, stop) against this node's table of ranks.

Fencing: a command from an epoch older than the newest one seen for its job is refused, so a
delayed or replayed command can never touch a newer placement; a start for a newer epoch first
kills the job's older ranks, which must not keep training (or writing checkpoints) beside it.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hosts.agent.ranks import DEFAULT_RANK_MODULE, RankProcess, Standbys, update_control
from hosts.agent.state import AgentState, write_json_atomic
from kernel.protocol import CONTROL_FILE, CommandType, RankLaunch, ReportKind, job_rank

log = logging.getLogger(__name__)

Emit = Callable[[int, int, dict], None]  # (job_id, epoch, report item)
FRESH_CONTROL = {"checkpoint": 0, "stop": False}
SERVING_MODULE = "hosts.serving.replica"
STAGED_FOLDERS = ("inputs", "resume", "checkpoints")  # in a run folder: staged inputs, saves in progress
_LAUNCH_FIELDS = {f.name for f in dataclasses.fields(RankLaunch)}


def launch_from_dict(data: dict) -> RankLaunch:
    """A RankLaunch from its JSON; unknown keys are ignored so a newer platform can add fields."""
    return RankLaunch(**{k: v for k, v in data.items() if k in _LAUNCH_FIELDS})


class RankTable:
    """Every rank this agent started (recently exited ones included, for the poll's rank states)."""

    def __init__(
        self,
        data_dir: Path,
        rank_module: str,
        emit: Emit,
        log_rate: float = 50.0,
        term_wait_s: float = 5.0,
        standbys: Standbys | None = None,
        network_env: Callable[[], dict[str, str]] | None = None,
        platform_url: str | None = None,
    ) -> None:
        self.data_dir, self.rank_module, self.emit = Path(data_dir), rank_module, emit
        self.standbys = standbys
        self.platform_url = platform_url  # where ranks ask for their storage URLs
        self.network_env = network_env  # the socket interface variables for new ranks (hosts.agent.network)
        self.log_rate, self.term_wait_s = log_rate, term_wait_s
        self._ranks: dict[tuple[int, int, int], RankProcess] = {}
        self._lock = threading.Lock()

    def run_dir(self, job_id: int, epoch: int) -> Path:
        return self.data_dir / "runs" / f"job-{job_id}-epoch-{epoch}"

    def select(self, job_id: int, epochs: Callable[[int], bool], live: bool = True) -> list[RankProcess]:
        with self._lock:
            ranks = [r for (j, e, _), r in self._ranks.items() if j == job_id and epochs(e)]
        return [r for r in ranks if not (live and r.exited.is_set())]

    def launch(self, launches: list[RankLaunch]) -> str | None:
        """Start the ranks (local rank = order by global rank); an error string if any failed.

        The first ranks of a job epoch on this node get a fresh control.json: one left over from
        an earlier agent process (same epoch, ranks gone) may say stop.
        """
        for job_id, epoch in {(item.job_id, item.epoch) for item in launches}:
            if not self.select(job_id, lambda e, epoch=epoch: e == epoch):
                write_json_atomic(self.run_dir(job_id, epoch) / CONTROL_FILE, FRESH_CONTROL, mode=0o644)
        errors = []
        for local_rank, launch in enumerate(sorted(launches, key=job_rank)):
            error = self._launch_one(launch, local_rank)
            if error:
                errors.append(error)
        return "; ".join(errors) or None

    def _launch_one(self, launch: RankLaunch, local_rank: int) -> str | None:
        key = (launch.job_id, launch.epoch, job_rank(launch))
        with self._lock:
            if key in self._ranks:
                return f"rank {key[2]} of job {launch.job_id} epoch {launch.epoch} already started here"
        run_dir = self.run_dir(launch.job_id, launch.epoch)
        launch = dataclasses.replace(launch, run_dir=str(run_dir))
        job, epoch = launch.job_id, launch.epoch
        rank = RankProcess(
            launch,
            local_rank,
            run_dir / f"rank-{job_rank(launch)}",
            lambda item: self.emit(job, epoch, item),
            self.log_rate,
            self.network_env() if self.network_env else None,
            on_exit=lambda: self._tidy(job, epoch),
            platform_url=self.platform_url,
        )
        module = SERVING_MODULE if launch.serve else self.rank_module  # a deployment's replica serves, not trains
        warm = self.standbys is not None and module == DEFAULT_RANK_MODULE and launch.device == "cpu"
        try:
            rank.start(module, self.standbys.take() if warm else None)
        except OSError as exc:
            error = f"rank {job_rank(launch)} failed to start: {exc}"
            self.emit(
                job,
                epoch,
                {"kind": ReportKind.EXIT, "rank": job_rank(launch), "code": 127, "error": error, "t": time.time()},
            )
            return error
        with self._lock:
            self._ranks[key] = rank
        log.info("started rank %s (pid %s)", key, rank.proc.pid)
        return None

    def _tidy(self, job_id: int, epoch: int) -> None:
        """Once a placement's ranks on this node have all exited, drop what they staged or left half
        written (inputs and resume files are links into the staging cache; a save's temp folder is
        uploaded or dead). Logs and launch files stay."""
        if self.select(job_id, lambda e: e == epoch):
            return
        run_dir = self.run_dir(job_id, epoch)
        for folder in STAGED_FOLDERS:
            shutil.rmtree(run_dir / folder, ignore_errors=True)

    def stop(self, job_id: int, upto_epoch: int, checkpoint: bool, grace_s: float) -> int:
        """Ask the ranks to stop through control.json; kill those still running after the grace."""
        ranks = self.select(job_id, lambda e: e <= upto_epoch)
        for epoch in sorted({r.launch.epoch for r in ranks}):
            update_control(self.run_dir(job_id, epoch), checkpoint=checkpoint, stop=True)
        for rank in ranks:
            self._in_background(rank, grace_s)
        return len(ranks)

    def kill(self, job_id: int, epochs: Callable[[int], bool], wait: bool) -> int:
        """SIGTERM now (no grace), SIGKILL after term_wait_s; `wait` blocks until they are gone."""
        ranks = self.select(job_id, epochs)
        threads = [self._in_background(rank, 0.0) for rank in ranks]
        if wait:
            for thread in threads:
                thread.join()
        return len(ranks)

    def _in_background(self, rank: RankProcess, grace_s: float) -> threading.Thread:
        thread = threading.Thread(
            target=rank.terminate, args=(grace_s, self.term_wait_s), name=f"terminate-{rank.key}", daemon=True
        )
        thread.start()
        return thread

    def states(self) -> list[dict]:
        with self._lock:
            ranks = list(self._ranks.values())
        return [
            {
                "job_id": r.launch.job_id,
                "epoch": r.launch.epoch,
                "rank": job_rank(r.launch),
                "pid": r.proc.pid if r.proc else None,
                "state": r.state,
            }
            for r in ranks
        ]

    def running(self) -> int:
        with self._lock:
            return sum(1 for r in self._ranks.values() if not r.exited.is_set())

    def prune(self, keep_s: float = 60.0) -> None:
        """Forget ranks that exited more than `keep_s` ago (their exit is in the report queue)."""
        cutoff = time.time() - keep_s
        with self._lock:
            for key in [k for k, r in self._ranks.items() if r.exited_at and r.exited_at < cutoff]:
                del self._ranks[key]

    def warm_ranks(self) -> int:
        return self.standbys.ready_count() if self.standbys is not None else 0

    def shutdown(self) -> None:
        """Agent exit: the ranks can't outlive their pipes, so end them now."""
        with self._lock:
            jobs = {job for job, _, _ in self._ranks}
        for job in jobs:
            self.kill(job, lambda e: True, wait=True)
        if self.standbys is not None:
            self.standbys.close()


class CommandExecutor:
    """Runs each command id at most once and queues its ack (with an error when refused)."""

    def __init__(self, state: AgentState, ranks: RankTable, default_grace_s: float = 30.0) -> None:
        self.state, self.ranks, self.default_grace_s = state, ranks, default_grace_s

    def handle(self, command: dict) -> None:
        command_id = command.get("id")
        if command_id is None:
            log.error("command without an id ignored: %r", command)
            return
        if self.state.executed(command_id):
            self.state.ack_again(command_id)
            return
        error = self._execute(command)
        if error:
            log.warning("command %s (%s) refused or failed: %s", command_id, command.get("type"), error)
        self.state.record(command_id, error)

    def _execute(self, command: dict) -> str | None:
        try:
            job_id, epoch, kind = int(command["job_id"]), int(command["epoch"]), command["type"]
        except (KeyError, TypeError, ValueError):
            return "malformed command: needs job_id, epoch and type"
        newest = self.state.newest_epoch(job_id)
        if newest is not None and epoch < newest:
            return f"stale epoch: job {job_id} is at epoch {newest}, command is for epoch {epoch}"
        handler = {
            CommandType.START: self._start,
            CommandType.CHECKPOINT: self._checkpoint,
            CommandType.STOP: self._stop,
        }.get(kind)
        if handler is None:
            return f"unknown command type {kind!r}"
        self.state.see_epoch(job_id, epoch)
        try:
            return handler(job_id, epoch, command.get("payload") or {})
        except Exception as exc:  # a bad payload must not take the agent down
            log.exception("command %s failed", command.get("id"))
            return f"{type(exc).__name__}: {exc}"

    def _start(self, job_id: int, epoch: int, payload: dict) -> str | None:
        launches = [launch_from_dict(item) for item in payload.get("ranks") or []]
        if not launches:
            return "start command without ranks"
        if any((item.job_id, item.epoch) != (job_id, epoch) for item in launches):
            return "a rank launch names another job or epoch than its command"
        older = self.ranks.kill(job_id, lambda e: e < epoch, wait=True)
        if older:
            log.info("stopped %d ranks of job %s older than epoch %s", older, job_id, epoch)
        return self.ranks.launch(launches)

    def _checkpoint(self, job_id: int, epoch: int, payload: dict) -> str | None:
        if not self.ranks.select(job_id, lambda e: e == epoch):
            return f"no running ranks of job {job_id} epoch {epoch} on this node"
        update_control(self.ranks.run_dir(job_id, epoch), checkpoint=True)
        return None

    def _stop(self, job_id: int, epoch: int, payload: dict) -> str | None:
        grace_s = float(payload.get("grace_s", self.default_grace_s))
        self.ranks.stop(job_id, epoch, bool(payload.get("checkpoint", False)), grace_s)
        return None
