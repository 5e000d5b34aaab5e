"""Waking a node agent's long-poll at once when a command is queued for it (through Redis).

Two listeners, one wake-up: a poll served by the sync web tier BLPOPs the node's list key; the
async agent service (workers/agent_service/) holds ONE pub/sub subscription per process on
`wake_channel()`, whose messages are node ids, and wakes its waiting polls from it. `wake_agent`
feeds both, in one round trip.

A wake-up is a hint: the database holds the commands. So while Redis is unreachable nothing here
raises: a wake-up is dropped (logged), and a waiting poll sleeps a short step and lets its caller
look at the database again, a short database poll instead of a Redis wait. Every command waits
at most the socket timeout (a paused Redis accepts connections and never answers); after one
failure Redis is left alone for a few seconds in this process.
"""

from __future__ import annotations

import math
import time
from functools import cache, lru_cache

import redis
from django.conf import settings

from base.outage import UNAVAILABLE, outage_of

WAKE_KEY = "starverse:agent-wake:{node_id}"
# Pub/sub channels are shared by every database of a Redis server: the channel names the database, so
# two platforms on one Redis (different /db numbers) never wake each other's agents.
WAKE_CHANNEL = "starverse:agent-wakes:db{db}"
DB_POLL_S = 0.5  # while Redis is down, a long-poll looks at the database this often


def _outage():
    return outage_of(settings.REDIS_URL)


@cache
def _redis() -> redis.Redis:
    timeout = settings.REDIS_SOCKET_TIMEOUT_S
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


@cache
def _waiting_redis(blocking_s: int) -> redis.Redis:
    """For a BLPOP of `blocking_s`: its socket timeout is that wait plus the usual one (one client per wait)."""
    timeout = settings.REDIS_SOCKET_TIMEOUT_S
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=blocking_s + timeout, socket_connect_timeout=timeout)


def wake_channel(redis_url: str | None = None) -> str:
    """The pub/sub channel of this platform's wake-ups (its Redis database's)."""
    return _channel_of(redis_url or settings.REDIS_URL)


@lru_cache(maxsize=8)
def _channel_of(redis_url: str) -> str:
    return WAKE_CHANNEL.format(db=redis.connection.parse_url(redis_url).get("db", 0))


def wake_agent(node_id: int) -> None:
    """Tell a waiting poll of this node that commands are pending (a hint; the DB is the truth)."""
    if _outage().down():
        return
    key = WAKE_KEY.format(node_id=node_id)
    try:
        pipe = _redis().pipeline()
        pipe.lpush(key, 1)
        pipe.ltrim(key, 0, 0)
        pipe.expire(key, 60)
        pipe.publish(wake_channel(), str(node_id))
        pipe.execute()
    except UNAVAILABLE as error:
        _outage().failed(error)


def wait_for_wake(node_id: int, timeout_s: float) -> bool:
    """Block up to `timeout_s` for a wake-up; True if one came.

    While Redis is down: sleep one short step and answer False, so the caller re-reads the database.
    """
    if timeout_s <= 0:
        return False
    if _outage().down():
        time.sleep(min(timeout_s, DB_POLL_S))
        return False
    blocking_s = max(1, math.ceil(timeout_s))
    try:
        return _waiting_redis(blocking_s).blpop([WAKE_KEY.format(node_id=node_id)], timeout=blocking_s) is not None
    except UNAVAILABLE as error:  # the wait is over (the socket timeout covers it): the caller looks again
        _outage().failed(error)
        return False


def clear_wake(node_id: int) -> None:
    if _outage().down():
        return
    try:
        _redis().delete(WAKE_KEY.format(node_id=node_id))
    except UNAVAILABLE as error:
        _outage().failed(error)
