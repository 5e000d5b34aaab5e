"""A TCP proxy a test can cut and restore: a real outage of the server behind it, seen only by its clients.

The suite's PostgreSQL is shared by every test run on the machine, so a test never stops it. Instead
it points its own connections at this proxy and cuts that: connections through it are closed, and
new ones are accepted and closed at once, as a server that went away looks to its clients.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from django.db import connections


class TcpProxy:
    """Forwards 127.0.0.1:<port> to (host, port) until cut; `restore` lets connections through again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = threading.Event()
        self.open.set()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """The server is gone: every connection through the proxy closes, and new ones are closed at once."""
        self.open.clear()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def restore(self) -> None:
        self.open.set()

    def close(self) -> None:
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class DatabaseProxy(TcpProxy):
    """The database behind a proxy: `restore` also drops this thread's broken connection, as the start of a
    request does in production (Django's test client leaves the test's connection alone)."""

    def restore(self) -> None:
        super().restore()
        connections.close_all()


@contextmanager
def database_behind_a_proxy() -> Iterator[DatabaseProxy]:
    """Every new connection of this process to the default database goes through a proxy (the settings
    dict is shared by all threads' connections); the open ones are closed first. Undone on exit."""
    shared = connections.settings["default"]
    original = shared["HOST"], shared["PORT"]
    proxy = DatabaseProxy(original[0] or "127.0.0.1", int(original[1] or 5432))
    connections.close_all()
    shared["HOST"], shared["PORT"] = "127.0.0.1", str(proxy.port)
    try:
        yield proxy
    finally:
        connections.close_all()
        shared["HOST"], shared["PORT"] = original
        proxy.close()
