"""A small supervisor for `make run`: each child restarts on its own, with backoff, until Ctrl-C.

Why hand-written and not honcho's Manager or supervisord: honcho stops every process when one
exits, and supervisord is a daemon with its own config files, log files and control socket, one
more thing to install and keep in step with the launcher. What the launcher needs fits here: per
child, restart after an exit with a doubling delay (reset once it has stayed up a while), give up
on it after a run of quick failures (loudly; the others keep running), and stop everything only
when asked, children first, then the stores they use. honcho still prints: its Printer gives every
child's lines a time, a padded name and a colour, as before.

Children are spawned from the thread that calls `run()` (the main thread in the launcher): the
kernel's parent-death signal, which stops a child when the launcher is killed outright, is tied to
the thread that forked it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from honcho.colour import get_colours
from honcho.printer import Message, Printer

from launcher._child import ChildServer, StoreError, death_signal

SYSTEM_NAME = "starverse"
STOP_GRACE_S = 15.0  # a child gets this long after SIGTERM (Celery finishes its task) before SIGKILL


@dataclass(frozen=True)
class RestartPolicy:
    """How a child that exits is restarted: `first_delay_s` doubling up to `max_delay_s`.

    An exit within `stable_after_s` of the start is a quick failure; after `give_up_after` quick
    failures in a row the child is left stopped. A child that stays up `stable_after_s` starts over
    at the first delay.
    """

    first_delay_s: float = 0.5
    max_delay_s: float = 10.0
    stable_after_s: float = 30.0
    give_up_after: int = 6

    def delay(self, quick_failures: int) -> float:
        """The wait before the next start, after `quick_failures` quick failures in a row (>= 1)."""
        return min(self.max_delay_s, self.first_delay_s * 2 ** max(0, quick_failures - 1))


@dataclass(frozen=True)
class ProcessSpec:
    """One long-running child: a shell command line and the variables it gets on top of ours."""

    command: str
    env: Mapping[str, str] = field(default_factory=dict)


def as_spec(value: str | ProcessSpec) -> ProcessSpec:
    """A command line or a ProcessSpec: one ProcessSpec."""
    return value if isinstance(value, ProcessSpec) else ProcessSpec(value)


class Output:
    """honcho's printer behind one lock, so that no two lines ever mix (the launcher's own included)."""

    def __init__(self, stream: IO[str], lock: threading.Lock) -> None:
        self.printer = Printer(stream)
        self.printer.width = len(SYSTEM_NAME)
        self.lock = lock
        self._colours = get_colours()
        self._colour_of: dict[str, str | None] = {SYSTEM_NAME: None}

    def register(self, name: str) -> None:
        """Give `name` a colour and widen the name column to fit it."""
        self._colour_of[name] = next(self._colours)
        self.printer.width = max(self.printer.width, len(name))

    def line(self, name: str, text: str) -> None:
        message = Message("line", text, datetime.datetime.now(), name, self._colour_of.get(name))
        with self.lock:
            self.printer.write(message)

    def system(self, text: str) -> None:
        self.line(SYSTEM_NAME, text)


class Child(Protocol):
    """What the supervisor needs of a child: start it, see whether it exited, stop it."""

    name: str

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None: ...

    def exit_code(self) -> int | None: ...

    def begin_stop(self) -> None: ...

    def finish_stop(self) -> None: ...

    def reap(self) -> None: ...


class CommandChild:
    """A shell command in a session of its own; its output goes line by line to `output`."""

    def __init__(self, name: str, spec: ProcessSpec, output: Output, base_env: Mapping[str, str], cwd: Path) -> None:
        self.name, self.spec, self.output, self.cwd = name, spec, output, cwd
        self.env = {**base_env, **spec.env, "PYTHONUNBUFFERED": "1"}
        self._proc: subprocess.Popen[bytes] | None = None
        output.register(name)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", f"exec {self.spec.command}"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: Ctrl-C reaches only us, and we can clean up its helpers
            preexec_fn=death_signal(signal.SIGTERM),
        )
        threading.Thread(target=self._relay, args=(self._proc,), name=f"{self.name}-output", daemon=True).start()

    def _relay(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for raw in proc.stdout:
                self.output.line(self.name, raw.decode("utf-8", "replace").rstrip("\r\n"))

    def exit_code(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def begin_stop(self) -> None:
        """SIGTERM to its group: gunicorn and Celery finish what they are doing."""
        self._signal_group(signal.SIGTERM)

    def finish_stop(self) -> None:
        """SIGKILL to whatever is left of its group."""
        self._signal_group(signal.SIGKILL)

    def reap(self) -> None:
        """After the leader exited: kill what is left of its group (a gunicorn or Celery pool worker
        orphaned by a `kill -9` of its master would keep the port or a task)."""
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        # The group outlives its leader while members remain, and its id is not reused meanwhile.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)


class StoreChild:
    """An embedded PostgreSQL or Redis: restarted on the same port and data dir after it dies."""

    def __init__(self, server: ChildServer) -> None:
        self.server = server
        self.name = server.process_name.removesuffix("-server")  # postgres, redis

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def start(self) -> None:
        """Blocks until the server answers (or raises StoreError): clients may use it right away."""
        self.server.start()

    def exit_code(self) -> int | None:
        return self.server.exit_code()

    def begin_stop(self) -> None:
        """Nothing yet: the stores stop after every other child, one by one, in `finish_stop`."""

    def finish_stop(self) -> None:
        """The server's own polite stop, escalating after its bounds."""
        self.server.stop()

    def reap(self) -> None:
        pid = self.server.pid
        if pid is not None:
            # Orphaned PostgreSQL backends still hold the old shared memory; the new postmaster would refuse it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.server.stop()  # forgets the dead process, so start() spawns a new one


@dataclass
class _State:
    """One child's restart bookkeeping."""

    child: Child
    started_at: float = 0.0
    quick_failures: int = 0
    restart_at: float | None = None
    given_up: bool = False
    starts: int = 0


@dataclass(frozen=True)
class Event:
    """Something the supervisor did or saw, for tests and for the log: start, exit, give_up, stop."""

    name: str
    kind: str
    at: float
    detail: str = ""


def describe_exit(code: int) -> str:
    """`exit code 3` or `killed by SIGKILL`."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Runs children until `request_stop()` or Ctrl-C, restarting each one that exits on its own."""

    def __init__(
        self,
        output: Output,
        policy: RestartPolicy | None = None,
        *,
        stop_grace_s: float = STOP_GRACE_S,
        tick_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.output, self.policy = output, policy or RestartPolicy()
        self.stop_grace_s, self.tick_s, self.clock = stop_grace_s, tick_s, clock
        self.stores: list[_State] = []
        self.children: list[_State] = []
        self.events: list[Event] = []
        self._stop = threading.Event()

    def add_store(self, server: ChildServer) -> None:
        """A store that is already running (started before the setup commands)."""
        self.stores.append(_State(StoreChild(server), started_at=self.clock(), starts=1))

    def add_command(self, child: Child) -> None:
        self.children.append(_State(child))

    def request_stop(self) -> None:
        """Ends `run()` from another thread (tests; the launcher stops by KeyboardInterrupt)."""
        self._stop.set()

    def state_of(self, name: str) -> _State:
        return next(state for state in [*self.stores, *self.children] if state.child.name == name)

    def run(self) -> None:
        """Start the children, then watch them until asked to stop; always stops them on the way out."""
        try:
            self.start_all()
            while not self._stop.wait(self.tick_s):
                self.check()
        finally:
            self.shutdown()

    def start_all(self) -> None:
        """Start every command child (the stores are running already)."""
        for state in self.children:
            self._start(state)

    def check(self) -> None:
        """One round: notice exits, start what is due. Stores first, since every child depends on them."""
        for state in [*self.stores, *self.children]:
            if state.given_up:
                continue
            now = self.clock()  # a store's restart above may have taken seconds
            if state.restart_at is None:
                code = state.child.exit_code()
                if code is not None:
                    self._exited(state, code, now)
            elif now >= state.restart_at:
                self._start(state)

    def _exited(self, state: _State, code: int, now: float) -> None:
        child, uptime = state.child, now - state.started_at
        child.reap()
        # A child that stayed up a while is healthy again: its next restart is quick, its count starts over.
        state.quick_failures = state.quick_failures + 1 if uptime < self.policy.stable_after_s else 0
        self._record(child.name, "exit", f"{describe_exit(code)} after {uptime:.1f}s")
        if state.quick_failures >= self.policy.give_up_after:
            self._give_up(state)
            return
        delay = self.policy.delay(state.quick_failures)
        state.restart_at = now + delay
        self.output.system(f"{child.name} exited ({describe_exit(code)}) after {uptime:.1f}s; restarting in {delay:g}s")

    def _give_up(self, state: _State) -> None:
        state.given_up = True
        name, runs, window = state.child.name, state.quick_failures, self.policy.stable_after_s
        self._record(name, "give_up", f"{runs} quick failures")
        banner = "!" * 72
        for text in (
            banner,
            f"GIVING UP on {name}: it failed {runs} times in a row, each within {window:g}s of starting.",
            f"Everything else keeps running. Read {name}'s lines above, fix it, then restart `make run`.",
            banner,
        ):
            self.output.system(text)

    def _start(self, state: _State) -> None:
        child = state.child
        state.restart_at = None
        state.started_at = self.clock()
        try:
            child.start()
        except (StoreError, OSError) as exc:  # a failed start counts like a quick exit
            self.output.system(f"{child.name} could not start: {exc}")
            self._record(child.name, "start_failed", str(exc))
            self._exited(state, 1, self.clock())
            return
        state.starts += 1
        again = f" (restart {state.starts - 1})" if state.starts > 1 else ""
        self._record(child.name, "start", f"pid {child.pid}")
        self.output.system(f"{child.name} started (pid {child.pid}){again}")

    def shutdown(self) -> None:
        """Children first (SIGTERM to all, SIGKILL after the grace), then the stores, in reverse order.

        Further Ctrl-C is ignored meanwhile, so a second keypress cannot leave a store running.
        """
        previous = _ignore_stop_signals()
        try:
            running = [s.child for s in self.children if s.child.pid is not None and s.child.exit_code() is None]
            for child in running:
                self.output.system(f"stopping {child.name} (pid {child.pid})")
                child.begin_stop()
            self._wait_all_exit(running, self.stop_grace_s)
            for child in running:
                if child.exit_code() is None:
                    self.output.system(f"{child.name} did not stop within {self.stop_grace_s:g}s: SIGKILL")
                child.finish_stop()  # also any helper process left in its group
            self._wait_all_exit(running, 5.0)
            for state in reversed(self.stores):
                if state.child.pid is not None:
                    self.output.system(f"stopping {state.child.name} (pid {state.child.pid})")
                state.child.finish_stop()
            self._record(SYSTEM_NAME, "stop")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _wait_all_exit(self, children: Iterable[Child], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(child.exit_code() is None for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _record(self, name: str, kind: str, detail: str = "") -> None:
        self.events.append(Event(name, kind, self.clock(), detail))


def _ignore_stop_signals() -> dict[int, object]:
    """Ignore SIGINT/SIGTERM (only possible from the main thread); returns what to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}


def command_children(
    processes: Mapping[str, str | ProcessSpec], output: Output, base_env: Mapping[str, str], cwd: Path
) -> list[CommandChild]:
    """One CommandChild per entry of name -> command line (or ProcessSpec, for a child's own variables)."""
    return [CommandChild(name, as_spec(value), output, base_env, cwd) for name, value in processes.items()]
