"""The agent service's ASGI application: enroll, poll and report, as the sync views answer them.

Same protocol as the main site's /api/v1/agent/ (kernel/protocol.py): JSON bodies validated by
workers/api/agent_serializers.py, node-token Bearer auth, the same status codes and bodies. What
differs is the cost of a waiting poll (an asyncio Event, woken by wakeups.WakeHub) and of the
per-poll work: token checks are remembered for AGENT_AUTH_CACHE_S (node_tokens), heartbeats are
written in one UPDATE per AGENT_HEARTBEAT_FLUSH_S (heartbeats). The ORM runs on a small pool of
threads, each with its own database connection: one pool for polls, one for reports and enrollments.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from base.outage import RETRY_AFTER_S, UNAVAILABLE_CODE, note_database_error
from fleet.models import Node
from kernel.protocol import AGENT_API_PREFIX, NODE_TOKEN_PREFIX
from workers.agent_service.http import HttpError, Request, read_request, send_json
from workers.agent_service.wakeups import WakeHub
from workers.api.agent_serializers import (
    EnrollSerializer,
    PollSerializer,
    ReportSerializer,
    StorageRequestSerializer,
)
from workers.api.client_address import seen_address
from workers.services import agent_endpoints, channel
from workers.services.heartbeats import HeartbeatBatch
from workers.services.node_tokens import NodeTokenCache

logger = logging.getLogger(__name__)

BEARER = ((b"www-authenticate", b"Bearer"),)
CONNECTION_CHECK_S = 5.0  # a DB thread drops a broken or too old connection this often at most, unless...


class DatabaseThreads:
    """Runs ORM calls off the event loop, on `size` threads (one Django connection each)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="agent-db")
        self._checked = threading.local()
        self._failed_at = float("-inf")  # ...a thread met the database away: then every thread checks at once

    async def run(self, function, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(self._call, function, args, kwargs))

    def _call(self, function, args, kwargs):
        now = time.monotonic()
        checked = getattr(self._checked, "at", float("-inf"))
        # After an outage every thread's connection may be broken: without this check each would fail one
        # more poll (a 503) once the database is back. The check pings it, as a sync view's request does.
        if now - checked > CONNECTION_CHECK_S or checked < self._failed_at:
            close_old_connections()  # what a request's start does for a sync view (CONN_MAX_AGE, broken ones)
            self._checked.at = now
        try:
            return function(*args, **kwargs)
        except (InterfaceError, OperationalError):
            connection.close()  # the next call connects afresh
            self._failed_at = time.monotonic()
            raise

    def shutdown(self) -> None:
        """Close every thread's connection (a test database can be dropped after), then the threads.

        One closing task per thread: each waits at the barrier, so no thread takes two of them."""
        barrier = threading.Barrier(self.size)

        def close_own_connection() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            connection.close()

        closing = [self._pool.submit(close_own_connection) for _ in range(self.size)]
        futures.wait(closing, timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)


class AgentService:
    """The ASGI callable. Its helpers start on the lifespan startup, or on the first request."""

    def __init__(self) -> None:
        self.routes = {
            f"{AGENT_API_PREFIX}/enroll/": self.enroll,
            f"{AGENT_API_PREFIX}/poll/": self.poll,
            f"{AGENT_API_PREFIX}/report/": self.report,
            f"{AGENT_API_PREFIX}/storage/": self.storage,
            "/healthz": self.health,
        }
        self.started = False
        self._tasks: list[asyncio.Task] = []

    def _start(self) -> None:
        if self.started:
            return
        self.started = True
        # Polls (auth misses, their writes, the pending read after a wake-up) never queue behind reports,
        # which take several times longer (row locks, a transaction each): two pools.
        self.db = DatabaseThreads(settings.AGENT_SERVICE_DB_THREADS)
        self.slow_db = DatabaseThreads(2)
        self.tokens = NodeTokenCache(settings.AGENT_AUTH_CACHE_S)
        self.heartbeats = HeartbeatBatch()
        self.hub = WakeHub(settings.REDIS_URL, channel.wake_channel(), settings.REDIS_SOCKET_TIMEOUT_S)
        self._tasks = [asyncio.create_task(self.hub.run()), asyncio.create_task(self._flush_heartbeats())]

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.started:
            await self.db.run(self.heartbeats.flush)  # the last second's heartbeats are not lost
            await asyncio.to_thread(self.db.shutdown)
            await asyncio.to_thread(self.slow_db.shutdown)
        self.started = False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            self._start()
            await self._http(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope, receive, send) -> None:
        handler = self.routes.get(scope["path"])
        try:
            if handler is None:
                raise HttpError(404, "Not found.")
            if scope["method"] != ("GET" if handler == self.health else "POST"):
                raise HttpError(405, f'Method "{scope["method"]}" not allowed.')
            request = await read_request(scope, receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 10_000_000)
            status, body = await handler(request)
            headers = ()
        except HttpError as error:
            status, body, headers = error.status, error.body, error.headers
        except ConnectionResetError:
            return
        except (InterfaceError, OperationalError) as error:
            logger.warning("agent service: %s %s: database unavailable (%s)", scope["method"], scope["path"], error)
            note_database_error(error)  # the reconciler won't count this outage as the agents' silence
            status, body = 503, {"detail": "The database is unavailable for a moment; retry.", "code": UNAVAILABLE_CODE}
            headers = ((b"retry-after", str(RETRY_AFTER_S).encode()),)
        except Exception:
            logger.exception("agent service: %s %s failed", scope["method"], scope["path"])
            status, body, headers = 500, {"detail": "A server error occurred."}, ()
        await send_json(send, status, body, headers)

    async def node_of(self, request: Request) -> Node:
        """The node whose token is in the Authorization header, or a 401 as the sync views answer."""
        header = request.headers.get("authorization", "").split()
        if not header or header[0].lower() != "bearer":
            raise HttpError(401, "Authentication credentials were not provided.", BEARER)
        if len(header) != 2 or not header[1].startswith(NODE_TOKEN_PREFIX):
            raise HttpError(401, "Agent endpoints need a node token.", BEARER)
        node = self.tokens.cached(header[1]) or await self.db.run(self.tokens.check, header[1])
        if node is None:
            raise HttpError(401, "Invalid node token (enroll again).", BEARER)
        return node

    async def enroll(self, request: Request) -> tuple[int, dict]:
        form = EnrollSerializer(data=request.json())
        if not form.is_valid():
            return 400, form.errors
        seen = seen_address(request)
        if not form.validated_data["address"] and not seen:
            message = "The platform can't tell this host's address from the request: declare it (--address)."
            return 400, {"address": [message]}
        status, body = await self.slow_db.run(agent_endpoints.enroll, form.validated_data, seen or "")
        if status == 201:
            self.tokens.forget_node(body["node_id"])
        return status, body

    async def poll(self, request: Request) -> tuple[int, dict]:
        node = await self.node_of(request)
        body = request.json()
        form = PollSerializer(data=body)
        if not form.is_valid():
            return 400, form.errors
        data = form.validated_data
        wait_s = min(data["wait_s"], settings.AGENT_POLL_WAIT_S)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        with self.hub.waiter(node.pk) as woken:  # before the first read: a wake-up meanwhile is kept
            commands = await self.db.run(
                agent_endpoints.start_poll,
                node,
                data,
                ranks_sent="ranks" in body,
                seen_address=seen_address(request),
                heartbeat=self.heartbeats.note,
            )
            while not commands and (left := deadline - loop.time()) > 0:
                if self.hub.listening:
                    try:
                        async with asyncio.timeout(left):
                            await woken.wait()
                    except TimeoutError:
                        pass
                    except asyncio.CancelledError:  # the server is stopping: answer now, the agent polls again
                        asyncio.current_task().uncancel()
                        break
                else:  # Redis is down: a short database poll instead of a wake-up
                    await asyncio.sleep(min(left, channel.DB_POLL_S))
                if woken.is_set() or not self.hub.listening:
                    woken.clear()
                    commands = await self.db.run(agent_endpoints.pending_commands, node.pk)
        return 200, agent_endpoints.poll_answer(node, commands)

    async def report(self, request: Request) -> tuple[int, dict]:
        node = await self.node_of(request)
        return await self.slow_db.run(_validated_report, node, request.json())

    async def storage(self, request: Request) -> tuple[int, dict]:
        """Storage URLs for a rank with its placement's grant (agent_endpoints.storage)."""
        token = agent_endpoints.grant_token(request.headers.get("authorization", ""))
        if token is None:
            raise HttpError(401, agent_endpoints.NO_GRANT["detail"], BEARER)
        form = StorageRequestSerializer(data=request.json())
        if not form.is_valid():
            return 400, form.errors
        return await self.db.run(agent_endpoints.storage, token, form.validated_data)

    async def health(self, request: Request) -> tuple[int, dict]:
        """Liveness, and the counters the benchmark prints."""
        return 200, {
            "listening": self.hub.listening,
            "waiting_polls": self.hub.waiting(),
            "wakeups": self.hub.wakeups,
            "heartbeats_written": self.heartbeats.written,
        }

    async def _flush_heartbeats(self) -> None:
        while True:
            await asyncio.sleep(settings.AGENT_HEARTBEAT_FLUSH_S)
            if self.heartbeats.pending():
                try:
                    await self.db.run(self.heartbeats.flush)
                except Exception:
                    logger.exception("agent service: heartbeat flush failed")


def _validated_report(node: Node, data: dict) -> tuple[int, dict]:
    """On a DB thread: a report of up to 5,000 items is worth validating off the event loop."""
    form = ReportSerializer(data=data)
    if not form.is_valid():
        return 400, form.errors
    return agent_endpoints.report(node, form.validated_data)
