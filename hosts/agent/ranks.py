"""Launching and supervising training-rank subprocesses, and the control.json they obey.

Each rank runs in its own process group (session), so stopping a rank also stops whatever it
spawned (data loader workers, compilers), and a signal to the agent's terminal doesn't reach it.
Three threads per rank: one per output pipe (a full pipe would block the rank) and one that waits
for the exit, so the exit item is queued only after every line the rank printed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import hosts
from hosts.agent.output import RankOutput, capped_lines
from hosts.agent.state import write_json_atomic
from hosts.runtime.staging import CACHE_DIR_ENV
from kernel.logtext import PathScrubber, scrubber
from kernel.protocol import CONTROL_FILE, PLATFORM_URL_ENV, RankLaunch, is_storage_credential, job_rank

log = logging.getLogger(__name__)

DEFAULT_RANK_MODULE = "hosts.runtime"
STANDBY_READY = "standby ready"  # hosts.runtime.__main__ prints it (that module imports torch, so not from there)
REPO_ROOT = str(Path(hosts.__file__).resolve().parent.parent)
_control_lock = threading.Lock()


# -- control.json ----------------------------------------------------------------------------
def read_control(run_dir: Path) -> dict:
    try:
        control = json.loads((Path(run_dir) / CONTROL_FILE).read_text())
    except (OSError, ValueError):
        control = {}
    return {
        "checkpoint": int(control.get("checkpoint", 0)),
        "stop": bool(control.get("stop", False)),
        "stop_checkpoint": bool(control.get("stop_checkpoint", True)),
    }


def update_control(run_dir: Path, checkpoint: bool = False, stop: bool = False) -> dict:
    """Bump the checkpoint counter and/or set stop; atomic, so rank 0 never reads half a file."""
    with _control_lock:
        control = read_control(run_dir)
        control["checkpoint"] += 1 if checkpoint else 0
        if stop and not control["stop"]:
            # The runtime checkpoints before stopping unless told not to (a cancel keeps no state).
            control["stop"], control["stop_checkpoint"] = True, checkpoint
        write_json_atomic(Path(run_dir) / CONTROL_FILE, control, mode=0o644)
    return control


# -- launching -------------------------------------------------------------------------------
def rank_argv(rank_module: str, config: Path) -> list[str]:
    """`python -m MODULE --config launch.json`; a path ending in .py runs as a script (tests)."""
    if rank_module.endswith(".py"):
        return [sys.executable, rank_module, "--config", str(config)]
    return [sys.executable, "-m", rank_module, "--config", str(config)]


def visible_device(device: str, parent_visible: str | None) -> str | None:
    """CUDA_VISIBLE_DEVICES for a rank on `device` ("cuda:N"), N counted in the agent's view."""
    if not device.startswith("cuda"):
        return None
    index = int(device.partition(":")[2] or 0)
    if parent_visible:
        ids = [part.strip() for part in parent_visible.split(",") if part.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)


def host_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment without any store credential: ranks reach storage only through their
    launch's grant (kernel/storage/grants.py), whatever the host was given (hosts are third parties)."""
    return {
        name: value for name, value in (os.environ if base is None else base).items() if not is_storage_credential(name)
    }


def rank_scrubber(launch: RankLaunch, rank_dir: Path) -> PathScrubber:
    """How this rank's lines leave the host: its run folder, the staging cache and the agent's data folder
    (runs/ is inside it) by name, not by path."""
    run = Path(launch.run_dir or rank_dir.parent)
    cache = os.environ.get(CACHE_DIR_ENV, "")
    return scrubber({str(run): "<run>", cache: "<cache>", str(run.parent.parent): "<agent>"})


def rank_env(
    launch: RankLaunch,
    local_rank: int,
    base: dict[str, str] | None = None,
    network: dict[str, str] | None = None,
    platform_url: str | None = None,
) -> dict[str, str]:
    """The rank's environment: torch.distributed's variables, the platform's URL (where it asks for storage
    URLs), and `network` (the socket interface variables of hosts.agent.network) where the agent's own
    environment doesn't set them; never a store credential."""
    env = host_env(base)
    if platform_url:
        env[PLATFORM_URL_ENV] = platform_url
    for name, value in (network or {}).items():
        env.setdefault(name, value)
    env.update(
        RANK=str(launch.rank),
        WORLD_SIZE=str(launch.world_size),
        LOCAL_RANK=str(local_rank),
        MASTER_ADDR=launch.master_addr,
        MASTER_PORT=str(launch.master_port),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    visible = visible_device(launch.device, env.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def write_launch(launch: RankLaunch, rank_dir: Path, cuda: bool) -> Path:
    """launch.json; with one GPU made visible per rank, that GPU is cuda:0 inside the rank."""
    config = launch.as_dict()
    if cuda:
        config["device"] = "cuda:0"
    rank_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = rank_dir / "launch.json"
    write_json_atomic(path, config, mode=0o600)
    return path


def spawn_rank(argv: list[str], cwd: Path, env: dict[str, str], stdin) -> subprocess.Popen:
    """A rank process in its own session, its output piped to the agent as text."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )


class Standbys:
    """Warm rank processes (`python -m hosts.runtime --standby`) with torch and DeepSpeed imported.

    CPU ranks only: a CUDA rank's visible device must be set before anything touches CUDA, so GPU
    ranks start cold. A standby that is taken is replaced in the background.
    """

    def __init__(self, size: int, work_dir: Path) -> None:
        self.size, self.work_dir = size, Path(work_dir)
        self._ready: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False
        if size > 0:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            threading.Thread(target=self._fill, name="standbys", daemon=True).start()

    def _spawn(self) -> subprocess.Popen:
        # Launching one applies the rank's own environment over this one: nothing may be in here to stay.
        env = dict(host_env(), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", DS_ACCELERATOR="cpu")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
        proc = spawn_rank([sys.executable, "-m", DEFAULT_RANK_MODULE, "--standby"], self.work_dir, env, subprocess.PIPE)
        # Its first line says the imports are done; until it is read, nobody else reads its stdout.
        proc.ready, proc.first_line_read = threading.Event(), threading.Event()
        threading.Thread(target=self._await_ready, args=(proc,), name="standby-ready", daemon=True).start()
        return proc

    @staticmethod
    def _await_ready(proc: subprocess.Popen) -> None:
        try:
            if proc.stdout.readline().strip() == STANDBY_READY:
                proc.ready.set()
        except (OSError, ValueError):
            pass
        finally:
            proc.first_line_read.set()

    def ready_count(self) -> int:
        with self._lock:
            return sum(1 for proc in self._ready if proc.ready.is_set() and proc.poll() is None)

    def _fill(self) -> None:
        with self._lock:
            self._ready = [proc for proc in self._ready if proc.poll() is None]
            missing = 0 if self._closed else self.size - len(self._ready)
        for _ in range(missing):
            proc = self._spawn()
            with self._lock:
                if self._closed:
                    proc.kill()
                    return
                self._ready.append(proc)

    def take(self) -> subprocess.Popen | None:
        with self._lock:
            while self._ready:
                proc = self._ready.pop(0)
                if proc.poll() is None:
                    break
            else:
                proc = None
        threading.Thread(target=self._fill, name="standbys", daemon=True).start()
        return proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        for proc in ready:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


class RankProcess:
    """One running rank: its process group, its output threads, its state."""

    def __init__(
        self,
        launch: RankLaunch,
        local_rank: int,
        rank_dir: Path,
        emit: Callable[[dict], None],
        log_rate: float = 50.0,
        network_env: dict[str, str] | None = None,
        on_exit: Callable[[], None] | None = None,
        platform_url: str | None = None,
    ) -> None:
        self.launch, self.local_rank, self.rank_dir = launch, local_rank, rank_dir
        self.network_env, self.on_exit, self.platform_url = network_env, on_exit, platform_url
        self.output = RankOutput(job_rank(launch), emit, log_rate, scrub=rank_scrubber(launch, rank_dir))
        self.emit = emit
        self.proc: subprocess.Popen | None = None
        self.exited = threading.Event()
        self.exit_code: int | None = None
        self.exited_at: float | None = None
        self._readers: list[threading.Thread] = []

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.launch.job_id, self.launch.epoch, job_rank(self.launch))

    @property
    def state(self) -> str:
        if self.exited.is_set():
            return "exited"
        return "running" if self.output.events else "starting"

    def start(self, rank_module: str, standby: subprocess.Popen | None = None) -> None:
        env = rank_env(self.launch, self.local_rank, network=self.network_env, platform_url=self.platform_url)
        config = write_launch(self.launch, self.rank_dir, cuda=self.launch.device.startswith("cuda"))
        if standby is not None:
            request = {"argv": ["--config", str(config)], "env": env, "cwd": str(self.rank_dir)}
            standby.stdin.write(json.dumps(request) + "\n")
            standby.stdin.close()
            self.proc = standby
        else:
            self.proc = spawn_rank(rank_argv(rank_module, config), self.rank_dir, env, subprocess.DEVNULL)
        name = f"rank-{self.launch.job_id}-{self.launch.epoch}-{job_rank(self.launch)}"
        self._readers = [
            threading.Thread(
                target=self._read,
                args=(self.proc.stdout, self.output.stdout_line),
                name=f"{name}-out",
                daemon=True,
            ),
            threading.Thread(
                target=self._read,
                args=(self.proc.stderr, self.output.stderr_line),
                name=f"{name}-err",
                daemon=True,
            ),
        ]
        threading.Thread(target=self._attach, args=(standby,), name=f"{name}-attach", daemon=True).start()

    def _attach(self, standby: subprocess.Popen | None) -> None:
        if standby is not None:
            standby.first_line_read.wait(300)  # a standby still importing: its ready line comes first
        for reader in self._readers:
            reader.start()
        self._watch()

    @staticmethod
    def _read(stream, handle: Callable[[str], None]) -> None:
        try:
            for line in capped_lines(stream):
                handle(line)
        except (OSError, ValueError):
            pass  # pipe closed under us: the watcher reports the exit

    def _watch(self) -> None:
        code = self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)  # a grandchild holding the pipe must not delay the exit report
        self.exit_code, self.exited_at = code, time.time()
        self.emit(self.output.exit_item(code))
        self.exited.set()
        log.info("rank %s exited with %s", self.key, code)
        if self.on_exit is not None:
            self.on_exit()

    def signal(self, sig: int) -> None:
        """Signal the rank's whole process group (it is the group leader)."""
        if self.proc is None or self.exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def terminate(self, grace_s: float, term_wait_s: float) -> None:
        """Wait `grace_s` for a voluntary exit, then SIGTERM, then SIGKILL the group."""
        if self.exited.wait(grace_s):
            return
        if grace_s > 0:
            log.warning("rank %s still running after %.1fs: SIGTERM", self.key, grace_s)
        self.signal(signal.SIGTERM)
        if self.exited.wait(term_wait_s):
            return
        log.warning("rank %s ignored SIGTERM: SIGKILL", self.key)
        self.signal(signal.SIGKILL)
        self.exited.wait(5)
