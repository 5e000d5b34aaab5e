"""Waking a node agent's long-poll at once when a command is queued for it (through Redis)."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings

WAKE_KEY = "starverse:agent-wake:{node_id}"


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=60)


def wake_agent(node_id: int) -> None:
    """Tell a waiting poll of this node that commands are pending (a hint; the DB is the truth)."""
    key = WAKE_KEY.format(node_id=node_id)
    pipe = _redis().pipeline()
    pipe.lpush(key, 1)
    pipe.ltrim(key, 0, 0)
    pipe.expire(key, 60)
    pipe.execute()


def wait_for_wake(node_id: int, timeout_s: float) -> bool:
    """Block up to `timeout_s` for a wake-up; True if one came."""
    if timeout_s <= 0:
        return False
    return _redis().blpop([WAKE_KEY.format(node_id=node_id)], timeout=timeout_s) is not None


def clear_wake(node_id: int) -> None:
    _redis().delete(WAKE_KEY.format(node_id=node_id))
