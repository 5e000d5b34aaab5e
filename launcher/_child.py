"""A server binary run as a foreground child: spawn into a log, wait until ready, stop for sure.

Why a child and not a daemon: whoever starts the server owns its lifetime, stops it in a
`finally`, and the kernel stops it (PR_SET_PDEATHSIG) if that owner is killed outright, so a
crashed launcher or test run leaves no orphan server behind. No Django import here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

START_TIMEOUT_S = 60.0


class StoreError(RuntimeError):
    """A store could not start; the message is written for the person at the terminal."""


class PortInUse(StoreError):
    """The port is taken (callers that picked a random port may simply try another)."""


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (for tests and throwaway servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, env_var: str, what: str, host: str = "127.0.0.1") -> None:
    """Fail early and clearly instead of letting the server die with a bind error in its log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortInUse(
                f"Port {port} on {host} is already in use, so {what} cannot listen there "
                f"({exc.strerror}). Set {env_var} to a free port, or stop what uses {port}."
            ) from None


def live_pid(pidfile: Path, process_name: str, *, keep_dead: bool = False) -> int | None:
    """The pid in `pidfile` if it is a live `process_name`, else None, clearing a stale file.

    A file naming another live process (pid reused after a reboot, or a zombie) is removed, since
    the server would take it for a running copy. One naming a dead process is removed too, unless
    `keep_dead`: PostgreSQL handles that case itself and also checks that no orphaned backend
    still uses the old shared memory, a check that deleting its lock file would skip.
    """
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        proc = psutil.Process(pid)
        if process_name in proc.name() and proc.status() != psutil.STATUS_ZOMBIE:
            return pid
    except psutil.NoSuchProcess:
        if keep_dead:
            return None
    except psutil.Error:
        pass
    pidfile.unlink(missing_ok=True)
    return None


def death_signal(sig: int) -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to send `sig` to the child when we die, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return lambda: libc.prctl(1, sig)  # 1 = PR_SET_PDEATHSIG; runs after setuid in the child


class ChildServer:
    """What both stores share: spawn into a log file, wait until ready, stop with escalation."""

    name = "server"
    process_name = "server"
    stop_signals: tuple[tuple[int, float], ...] = ((signal.SIGTERM, 20.0),)

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.log_path = self.data_dir / f"{self.process_name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        """The status of a server that died on its own; None while it runs, or before start / after stop."""
        return self._proc.poll() if self._proc is not None else None

    def _spawn(self, argv: list[str], **kwargs: Any) -> None:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches the launcher, not the store
                preexec_fn=death_signal(self.stop_signals[0][0]),
                **kwargs,
            )

    def _wait_ready(self, probe: Callable[[], bool], timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                code, self._proc = self._proc.returncode, None
                raise StoreError(f"{self.name} exited with code {code} while starting.\n{self.log_tail()}")
            if probe():
                return
            time.sleep(0.1)
        self.stop()
        raise StoreError(f"{self.name} did not accept connections within {timeout:.0f}s.\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        """The end of the server log, to put in error messages."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no log at {self.log_path})"
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text)

    def stop(self) -> None:
        """Polite shutdown signal first, harsher ones after a bound, then SIGKILL the group."""
        proc = self._proc
        if proc is None:
            return
        for sig, wait_s in self.stop_signals:
            if proc.poll() is not None:
                break
            proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait_s)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._proc = None  # only now: if interrupted above, a second stop() tries again

    def __enter__(self) -> ChildServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError
