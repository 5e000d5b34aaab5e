"""The embedded stores and the local launcher, against the real binaries (no Django database).

Why these tests: `make run` and the whole test suite stand on these servers starting on a bare
machine (as root in CI), keeping data across restarts, refusing to run twice on one data dir, and
leaving no process behind when stopped.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import redis

from launcher.stores import EmbeddedPostgres, EmbeddedRedis, StoreError, free_port

REPO = Path(__file__).resolve().parents[2]


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path, free_port(), durable=False)
    yield server
    server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path, free_port())
    yield server
    server.stop()


def test_postgres_accepts_connections_and_keeps_data_across_restarts(postgres: EmbeddedPostgres) -> None:
    postgres.start()
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (value text)")
        conn.execute("INSERT INTO kept VALUES ('across restarts')")
    postgres.stop()
    assert not _port_open(postgres.port)
    postgres.start()
    with psycopg.connect(postgres.url) as conn:
        assert conn.execute("SELECT value FROM kept").fetchone() == ("across restarts",)


def test_postgres_refuses_a_second_server_on_the_same_data_dir(postgres: EmbeddedPostgres) -> None:
    postgres.start()
    second = EmbeddedPostgres(postgres.data_dir, free_port())
    with pytest.raises(StoreError, match=rf"already running .*pid {postgres.pid}"):
        second.start()
    assert postgres.running


def test_postgres_recovers_from_a_killed_run(postgres: EmbeddedPostgres) -> None:
    postgres.start()
    os.killpg(postgres.pid, signal.SIGKILL)  # the whole server, as an OOM kill or crash would
    psutil.wait_procs([psutil.Process(postgres.pid)], timeout=10)
    assert (postgres.pgdata / "postmaster.pid").exists()
    postgres.start()
    with psycopg.connect(postgres.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_postgres_ignores_a_pid_file_naming_another_live_process(postgres: EmbeddedPostgres) -> None:
    postgres.start()
    postgres.stop()
    (postgres.pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n")  # alive, but not postgres
    postgres.start()
    assert postgres.running


def test_postgres_uses_a_short_socket_dir_when_the_data_dir_is_deep(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / ("d" * 100), free_port(), durable=False)
    try:
        server.start()
        pidfile = (server.pgdata / "postmaster.pid").read_text().splitlines()
        socket_dir = Path(pidfile[4])  # line 5 of postmaster.pid: the socket directory
        assert len(str(socket_dir)) < 60 and socket_dir.is_dir()
    finally:
        server.stop()
    assert not socket_dir.exists()


def test_redis_answers_and_keeps_data_across_restarts(redis_server: EmbeddedRedis) -> None:
    redis_server.start()
    redis.Redis.from_url(redis_server.url).set("kept", "across restarts")
    redis_server.stop()
    assert not _port_open(redis_server.port)
    redis_server.start()
    assert redis.Redis.from_url(redis_server.url).get("kept") == b"across restarts"


def test_redis_refuses_a_second_server_on_the_same_data_dir(redis_server: EmbeddedRedis) -> None:
    redis_server.start()
    with pytest.raises(StoreError, match=rf"already running .*pid {redis_server.pid}"):
        EmbeddedRedis(redis_server.data_dir, free_port()).start()


@pytest.mark.parametrize(
    ("factory", "env_var"),
    [(EmbeddedPostgres, "STARVERSE_PG_PORT"), (EmbeddedRedis, "STARVERSE_REDIS_PORT")],
)
def test_a_taken_port_fails_naming_the_port_and_the_variable(
    tmp_path: Path, factory: Callable[[Path, int], EmbeddedPostgres | EmbeddedRedis], env_var: str
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(StoreError, match=rf"Port {port} .*{env_var}"):
            factory(tmp_path, port).start()


class _Lines:
    """A child's stdout read by a thread, so the test can wait for a line with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=lambda: [self._queue.put(line) for line in proc.stdout], daemon=True).start()

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line.strip()
        raise AssertionError(f"no line with {text!r} in:\n{''.join(self.seen)}")


def _spawn(args: list[str], **env: str) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env={**clean, **env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop_and_check_nothing_left(proc: subprocess.Popen[str], sig: int) -> None:
    family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(family, timeout=10)
    assert alive == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stores_command_prints_urls_and_a_signal_stops_everything(tmp_path: Path, sig: int) -> None:
    proc = _spawn(
        ["-m", "launcher", "stores"],
        STARVERSE_DATA_DIR=str(tmp_path),
        STARVERSE_PG_PORT=str(free_port()),
        STARVERSE_REDIS_PORT=str(free_port()),
    )
    try:
        lines = _Lines(proc)
        database_url = lines.wait_for("DATABASE_URL=").split("=", 1)[1]
        redis_url = lines.wait_for("REDIS_URL=").split("=", 1)[1]
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("starverse",)
        assert redis.Redis.from_url(redis_url).ping()
        _stop_and_check_nothing_left(proc, sig)
    finally:
        proc.kill()


def _serve(processes: dict[str, str], port: int) -> subprocess.Popen[str]:
    """launcher.serve() in a child process, since Ctrl-C/SIGTERM stop that whole process."""
    code = "import sys\nfrom launcher.platform import serve\n"
    return _spawn(["-c", code + f"sys.exit(serve({processes!r}, '127.0.0.1', {port}))"])


def test_serve_announces_the_url_and_stops_its_processes_on_sigterm() -> None:
    port = free_port()
    web = f"{sys.executable} -m http.server {port} --bind 127.0.0.1"
    proc = _serve({"web": web, "idle": "sleep 600"}, port)
    try:
        line = _Lines(proc).wait_for("Starverse is running at")
        assert line.endswith(f"Starverse is running at http://127.0.0.1:{port}  (Ctrl-C to stop)")
        _stop_and_check_nothing_left(proc, signal.SIGTERM)
    finally:
        proc.kill()


def test_serve_restarts_a_process_that_dies_and_keeps_the_others_running() -> None:
    proc = _serve({"idle": "sleep 600", "crash": "sh -c 'sleep 1; exit 3'"}, free_port())
    try:
        lines = _Lines(proc)
        idle = int(lines.wait_for("idle started (pid").rsplit("pid ", 1)[1].rstrip(")"))
        lines.wait_for("crash exited (exit code 3) after 1.")
        assert lines.wait_for("crash started (pid").endswith("(restart 1)")
        assert proc.poll() is None and psutil.Process(idle).is_running()
        _stop_and_check_nothing_left(proc, signal.SIGTERM)
    finally:
        proc.kill()
