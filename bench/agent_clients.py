"""The benchmark's simulated clients (asyncio, one process): node agents that long-poll and report, and users.

bench/agents.py runs thousands of `agent` coroutines and a few `user` ones against a platform and
reads what they saw from a shared `Tally`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

USER_THINK_S = 0.2


@dataclass
class Tally:
    measuring: bool = False
    polls: int = 0
    received: dict[int, float] = field(default_factory=dict)  # command id -> when a poll returned it
    reports_sent: set[str] = field(default_factory=set)  # the lines of the reports the platform answered 200
    report_errors: int = 0  # answers other than 200 (each retried)
    poll_errors: int = 0
    error_kinds: Counter = field(default_factory=Counter)  # exception names and HTTP statuses
    user_ms: list[float] = field(default_factory=list)
    user_errors: int = 0


class AgentConnection:
    """One kept-alive HTTP/1.1 connection of one agent: JSON POSTs with its node token.

    Why not httpx here: 2,000 agents' requests through httpx cost this process more CPU than the
    agent service spends answering them, and on a shared 2-core machine a lagging load generator
    shows up as delivery latency. This speaks just the HTTP the agent service answers (Content-Length
    bodies); the real agent's client is hosts/agent/client.py (httpx), the bodies are the same.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict, timeout_s: float) -> tuple[int, dict]:
        payload = json.dumps(body).encode()
        request = f"POST {path} HTTP/1.1\r\n{self.head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
        for attempt in range(2):
            reused = self.writer is not None
            try:
                async with asyncio.timeout(timeout_s):
                    if self.writer is None:
                        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                    self.writer.write(request)
                    return await self._answer()
            except (OSError, asyncio.IncompleteReadError, ValueError) as error:
                self.close()
                if not reused or attempt or not isinstance(error, ConnectionError | asyncio.IncompleteReadError):
                    raise
                # the server closed a kept-alive connection as this request left: once more, on a new one
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, dict]:
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionResetError("connection closed before the answer")
        status, length, close = int(status_line.split()[1]), 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        data = await self.reader.readexactly(length)
        if close:
            self.close()
        return status, json.loads(data) if data else {}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def agent(host: str, port: int, node: tuple, args, tally: Tally, stop: asyncio.Event) -> None:
    """One node agent: long-polls (acking what it got), and reports a log line every --report-every s."""
    node_id, token, job_id, epoch, rank = node
    polls, reporting = AgentConnection(host, port, token), AgentConnection(host, port, token)
    await asyncio.sleep(random.uniform(0, args.ramp))
    reporter = asyncio.create_task(reports(reporting, node, args, tally, stop))
    acks: list[int] = []
    ranks = [{"job_id": job_id, "epoch": epoch, "rank": rank, "pid": 4242, "state": "running"}]
    try:
        while not stop.is_set():
            body = {"wait_s": args.poll_wait, "acks": acks, "ranks": ranks, "health": {"load": 0.5}}
            try:
                status, answer = await polls.post("/api/v1/agent/poll/", body, args.poll_wait + 15.0)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
                tally.poll_errors += 1
                tally.error_kinds[f"poll {type(error).__name__}"] += 1
                await asyncio.sleep(1)
                continue
            now = time.time()
            if status != 200:
                tally.poll_errors += 1
                tally.error_kinds[f"poll {status}"] += 1
                await asyncio.sleep(1)
                continue
            commands = answer["commands"]
            tally.polls += tally.measuring
            for command in commands:
                tally.received.setdefault(command["id"], now)
            acks = [command["id"] for command in commands]
    finally:
        await reporter
        polls.close()
        reporting.close()


async def reports(http: AgentConnection, node: tuple, args, tally: Tally, stop: asyncio.Event) -> None:
    """A log report every --report-every s; each line names its report, so a lost one is found by name."""
    node_id, _, job_id, epoch, rank = node
    await asyncio.sleep(random.uniform(0, args.report_every))
    sequence = 0
    while not stop.is_set():
        sequence += 1
        line = f"report {node_id}-{sequence}"
        body = {"job_id": job_id, "epoch": epoch, "items": [{"kind": "log", "rank": rank, "line": line}]}
        while True:  # as the agent keeps a report until the platform took it
            try:
                status, _ = await http.post("/api/v1/agent/report/", body, 30.0)
                if status == 200:
                    tally.reports_sent.add(line)
                    break
                tally.error_kinds[f"report {status}"] += 1
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
                tally.error_kinds[f"report {type(error).__name__}"] += 1
            tally.report_errors += 1
            await asyncio.sleep(1)
        with_jitter = args.report_every * random.uniform(0.9, 1.1)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), with_jitter)


async def user(web_url: str, token: str, tally: Tally, stop: asyncio.Event) -> None:
    paths = ["/api/v1/account/", "/api/v1/jobs/"]
    async with httpx.AsyncClient(base_url=web_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        turn = 0
        while not stop.is_set():
            started = time.perf_counter()
            try:
                answer = await http.get(paths[turn % 2])
                ok = answer.status_code == 200
            except httpx.HTTPError as error:
                tally.error_kinds[f"user {type(error).__name__}"] += 1
                ok = False
            if tally.measuring:
                if ok:
                    tally.user_ms.append((time.perf_counter() - started) * 1000)
                else:
                    tally.user_errors += 1
            turn += 1
            await asyncio.sleep(USER_THINK_S)
