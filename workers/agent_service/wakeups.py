"""One Redis subscription per agent-service process, fanned out to the polls waiting in it.

Why: a BLPOP per waiting poll is a Redis connection per agent (2,000 agents: 2,000 connections and
as many blocked threads). Here the process subscribes once to channel.wake_channel(), whose
messages are node ids (channel.wake_agent publishes them), and sets the asyncio Events of that
node's waiting polls.

A wake-up is a hint; the database holds the commands. While the subscription is down (Redis
unreachable, or paused: a PING on a second connection times out), `listening` is False and the
polls re-read the database every channel.DB_POLL_S instead; on every change of `listening` all
waiting polls are woken, so that none sleeps through a wake-up published while nobody listened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

HEALTH_EVERY_S = 1.0  # a PING this often tells a paused Redis from a quiet one
RETRY_FIRST_S, RETRY_CAP_S = 0.5, 5.0


class WakeHub:
    def __init__(self, redis_url: str, channel: str, socket_timeout_s: float) -> None:
        self.redis_url, self.channel, self.socket_timeout_s = redis_url, channel, socket_timeout_s
        self._waiting: dict[int, set[asyncio.Event]] = {}
        self.listening = False
        self.wakeups = 0  # node ids received (the benchmark reads it)

    @contextlib.contextmanager
    def waiter(self, node_id: int) -> Iterator[asyncio.Event]:
        """An Event set when the node is woken; register it BEFORE reading the pending commands."""
        event = asyncio.Event()
        self._waiting.setdefault(node_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiting.get(node_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[node_id]

    def waiting(self) -> int:
        return sum(len(events) for events in self._waiting.values())

    def wake(self, node_id: int) -> None:
        for event in self._waiting.get(node_id, ()):
            event.set()

    def wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

    def _set_listening(self, listening: bool) -> None:
        if listening != self.listening:
            self.listening = listening
            logger.warning("agent wake-ups: %s", "listening" if listening else "Redis unreachable, polls read the DB")
            self.wake_all()

    async def run(self) -> None:
        """Subscribe, listen, and on any failure resubscribe with backoff; until cancelled."""
        delay = RETRY_FIRST_S
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as error:
                logger.debug("agent wake-up subscription failed: %s", error)
            self._set_listening(False)
            await asyncio.sleep(delay)
            delay = min(RETRY_CAP_S, delay * 2)

    async def _listen(self) -> None:
        timeout = self.socket_timeout_s
        client = aioredis.Redis.from_url(self.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout)
        subscriber = aioredis.Redis.from_url(self.redis_url, socket_connect_timeout=timeout)
        pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.channel)
            await client.ping()
            self._set_listening(True)
            loop = asyncio.get_running_loop()
            next_health = loop.time() + HEALTH_EVERY_S
            while True:
                message = await pubsub.get_message(timeout=HEALTH_EVERY_S)
                if message is not None and message["type"] == "message":
                    self._wake_from(message["data"])
                if loop.time() >= next_health:
                    await client.ping()  # raises on a paused or gone Redis: resubscribe
                    next_health = loop.time() + HEALTH_EVERY_S
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await subscriber.aclose()
            with contextlib.suppress(Exception):
                await client.aclose()

    def _wake_from(self, data: bytes | str) -> None:
        text = data.decode() if isinstance(data, bytes) else str(data)
        for part in text.split(","):
            if part.strip().isdigit():
                self.wakeups += 1
                self.wake(int(part))
