"""The launcher's supervisor with tiny throwaway commands: restart, backoff, give-up, clean stop.

Each test drives `Supervisor.check()` itself (what `run()` does every tick), so it can look at the
children between rounds. No Django, no database: only processes, and a real embedded Redis and
PostgreSQL where a store is the point.
"""

from __future__ import annotations

import io
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import redis

from launcher.stores import EmbeddedPostgres, EmbeddedRedis, free_port
from launcher.supervisor import CommandChild, Output, ProcessSpec, RestartPolicy, Supervisor

REPO = Path(__file__).resolve().parents[2]
FAST = RestartPolicy(first_delay_s=0.1, max_delay_s=0.4, stable_after_s=5.0, give_up_after=5)


class Harness:
    """A supervisor writing to a string, with its children's commands given by name."""

    def __init__(self, policy: RestartPolicy = FAST, stop_grace_s: float = 5.0) -> None:
        self.stream = io.StringIO()
        self.output = Output(self.stream, threading.Lock())
        self.supervisor = Supervisor(self.output, policy, stop_grace_s=stop_grace_s)

    def add(self, name: str, command: str, env: dict[str, str] | None = None) -> None:
        spec = ProcessSpec(command, env or {})
        self.supervisor.add_command(CommandChild(name, spec, self.output, os.environ, REPO))

    def pump(self, until: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
        """Run supervision rounds until `until()` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{self.text}"
            self.supervisor.check()
            time.sleep(0.02)

    def pid(self, name: str) -> int | None:
        return self.supervisor.state_of(name).child.pid

    def starts(self, name: str) -> int:
        return self.supervisor.state_of(name).starts

    def events(self, name: str, kind: str) -> list[float]:
        return [event.at for event in self.supervisor.events if event.name == name and event.kind == kind]

    @property
    def text(self) -> str:
        return self.stream.getvalue()


@pytest.fixture
def harness() -> Iterator[Harness]:
    made = Harness()
    yield made
    made.supervisor.shutdown()


def alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_child_is_restarted_and_the_others_keep_running(harness: Harness) -> None:
    harness.add("agent", "sleep 60")
    harness.add("web", "sleep 60")
    harness.supervisor.start_all()
    agent, web = harness.pid("agent"), harness.pid("web")
    os.kill(agent, signal.SIGKILL)
    harness.pump(lambda: harness.starts("agent") == 2, what="the agent's restart")
    assert alive(harness.pid("agent")) and harness.pid("agent") != agent
    assert harness.pid("web") == web and alive(web)
    assert "agent exited (killed by SIGKILL)" in harness.text
    assert "agent started (pid" in harness.text and "(restart 1)" in harness.text


def test_quick_failures_back_off_doubling_then_the_child_is_given_up_while_the_others_run(harness: Harness) -> None:
    harness.add("crash", "sh -c 'exit 3'")
    harness.add("steady", "sleep 60")
    harness.supervisor.start_all()
    steady = harness.pid("steady")
    harness.pump(lambda: harness.supervisor.state_of("crash").given_up, what="giving up")

    exits, starts = harness.events("crash", "exit"), harness.events("crash", "start")
    assert len(exits) == FAST.give_up_after and len(starts) == FAST.give_up_after
    waits = [start - exit for exit, start in zip(exits, starts[1:], strict=False)]
    for wait, expected in zip(waits, [0.1, 0.2, 0.4, 0.4], strict=True):
        assert expected <= wait < expected + 1.0, waits
    assert "GIVING UP on crash: it failed 5 times in a row" in harness.text
    assert "exit code 3" in harness.text

    harness.pump(lambda: time.sleep(0.5) or True)  # a given-up child stays stopped
    assert harness.starts("crash") == FAST.give_up_after
    assert harness.pid("steady") == steady and alive(steady)


def test_a_child_that_stayed_up_a_while_restarts_at_the_first_delay_and_is_never_given_up() -> None:
    harness = Harness(RestartPolicy(first_delay_s=0.1, max_delay_s=5.0, stable_after_s=0.3, give_up_after=2))
    try:
        harness.add("flaky", "sh -c 'sleep 0.5; exit 1'")
        harness.supervisor.start_all()
        harness.pump(lambda: harness.starts("flaky") >= 4, what="four starts")
        exits, starts = harness.events("flaky", "exit"), harness.events("flaky", "start")
        assert all(0.1 <= start - exit < 1.0 for exit, start in zip(exits, starts[1:], strict=False))
        assert not harness.events("flaky", "give_up")
    finally:
        harness.supervisor.shutdown()


def test_a_failed_start_counts_as_a_quick_failure(harness: Harness, tmp_path: Path) -> None:
    child = CommandChild("nowhere", ProcessSpec("sleep 60"), harness.output, os.environ, tmp_path / "missing")
    harness.supervisor.add_command(child)
    harness.supervisor.start_all()
    harness.pump(lambda: harness.supervisor.state_of("nowhere").given_up, what="giving up")
    assert harness.text.count("nowhere could not start") == FAST.give_up_after


def test_each_child_gets_its_own_variables_and_its_lines_are_prefixed_with_its_name(harness: Harness) -> None:
    harness.add("agent-1", "sh -c 'echo token=$AGENT_SECRET; sleep 60'", {"AGENT_SECRET": "one"})
    harness.add("agent-2", "sh -c 'echo token=$AGENT_SECRET; sleep 60'", {"AGENT_SECRET": "two"})
    harness.supervisor.start_all()
    harness.pump(lambda: harness.text.count("token=") == 2, what="both lines")
    assert re.search(r"^\d\d:\d\d:\d\d agent-1 +\| token=one$", harness.text, re.MULTILINE), harness.text
    assert re.search(r"^\d\d:\d\d:\d\d agent-2 +\| token=two$", harness.text, re.MULTILINE), harness.text
    assert "token=one" not in " ".join(psutil.Process(harness.pid("agent-1")).cmdline())


def test_stop_ends_children_first_then_the_store_and_leaves_no_process(tmp_path: Path) -> None:
    harness = Harness(stop_grace_s=1.0)
    store = EmbeddedRedis(tmp_path, free_port())
    store.start()
    harness.supervisor.add_store(store)
    harness.add("polite", "sleep 60")
    harness.add("stubborn", "sh -c \"trap '' TERM; sleep 60 & wait; sleep 60\"")
    harness.supervisor.start_all()
    time.sleep(0.3)  # let the stubborn shell set its trap
    family = [psutil.Process(store.pid)]
    for name in ("polite", "stubborn"):
        leader = psutil.Process(harness.pid(name))
        family += [leader, *leader.children(recursive=True)]
    assert len(family) >= 4

    harness.supervisor.shutdown()

    _, left = psutil.wait_procs(family, timeout=10)
    assert left == []
    lines = [line.split("| ", 1)[1] for line in harness.text.splitlines() if "| stopping" in line]
    assert lines[:2] == [f"stopping polite (pid {family[1].pid})", f"stopping stubborn (pid {family[2].pid})"]
    assert lines[2] == f"stopping redis (pid {family[0].pid})"
    assert "stubborn did not stop within 1s: SIGKILL" in harness.text


def test_leftovers_of_a_killed_childs_group_are_killed_before_it_restarts(harness: Harness) -> None:
    harness.add("master", "sh -c 'sleep 60 & wait'")  # like gunicorn's or Celery's pool workers
    harness.supervisor.start_all()
    harness.pump(lambda: psutil.Process(harness.pid("master")).children(), what="the helper")
    [helper] = psutil.Process(harness.pid("master")).children()
    os.kill(harness.pid("master"), signal.SIGKILL)
    harness.pump(lambda: harness.starts("master") == 2, what="the restart")
    psutil.wait_procs([helper], timeout=5)
    assert not alive(helper.pid)


def test_a_killed_redis_comes_back_on_its_port_with_its_data(harness: Harness, tmp_path: Path) -> None:
    store = EmbeddedRedis(tmp_path, free_port())
    store.start()
    harness.supervisor.add_store(store)
    client = redis.Redis.from_url(store.url)
    client.set("kept", "across a crash")
    first = store.pid
    os.kill(first, signal.SIGKILL)
    harness.pump(lambda: harness.starts("redis") == 2, what="Redis's restart")
    assert store.pid != first and store.running
    assert client.get("kept") == b"across a crash"
    assert "redis exited (killed by SIGKILL)" in harness.text


def test_a_killed_postgres_comes_back_on_its_port_with_its_data(harness: Harness, tmp_path: Path) -> None:
    store = EmbeddedPostgres(tmp_path, free_port())  # durable, as `make run` runs it
    store.start()
    harness.supervisor.add_store(store)
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (value text)")
        conn.execute("INSERT INTO kept VALUES ('across a crash')")
    os.kill(store.pid, signal.SIGKILL)  # the postmaster alone: its backends are left over, as after an OOM kill
    harness.pump(lambda: harness.starts("postgres") == 2, timeout=90, what="PostgreSQL's restart")
    with psycopg.connect(store.url) as conn:
        assert conn.execute("SELECT value FROM kept").fetchone() == ("across a crash",)
