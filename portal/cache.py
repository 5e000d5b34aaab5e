"""Django's Redis cache, failing open: while Redis is unreachable the cache behaves as an empty one.

What uses the cache here are request throttles (DRF's and allauth's rate limits) and memos. A
throttle that can't read its history lets the request through, which is the right failure: a
Redis outage should cost rate limiting for a few seconds, not every request. Each command waits at
most the socket timeouts set in CACHES' OPTIONS; after a failure the cache is skipped for a few
seconds (base.outage.outage_of) instead of paying the timeout on every call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

from base.outage import UNAVAILABLE, outage_of


def _fail_open(fallback: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run the command unless Redis is known to be down; on an outage answer `fallback(*args)`."""

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def guarded(self: RedisCacheClient, *args: Any) -> Any:
            outage = outage_of(self._servers[0])
            if outage.down():
                return fallback(*args)
            try:
                return command(self, *args)
            except UNAVAILABLE as error:
                outage.failed(error)
                return fallback(*args)

        return guarded

    return wrap


def _nothing(*args: Any) -> None:
    return None


class FailOpenRedisCacheClient(RedisCacheClient):
    """Each command answers as an empty cache would when Redis does not answer.

    One `redis.Redis` client per connection pool, made once: Django makes a new one for every command,
    which costs more CPU than the command's round trip (a third of a millisecond per API request, three
    cache commands each). Django's caches are per thread, so each client is only used by its thread.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client

    add = _fail_open(lambda key, value, timeout: True)(RedisCacheClient.add)  # a lock taken: nobody waits on it
    get = _fail_open(lambda key, default: default)(RedisCacheClient.get)
    set = _fail_open(_nothing)(RedisCacheClient.set)
    touch = _fail_open(lambda key, timeout: False)(RedisCacheClient.touch)
    delete = _fail_open(lambda key: False)(RedisCacheClient.delete)
    get_many = _fail_open(lambda keys: {})(RedisCacheClient.get_many)
    has_key = _fail_open(lambda key: False)(RedisCacheClient.has_key)
    incr = _fail_open(lambda key, delta: delta)(RedisCacheClient.incr)  # as if counting started now
    set_many = _fail_open(_nothing)(RedisCacheClient.set_many)
    delete_many = _fail_open(_nothing)(RedisCacheClient.delete_many)
    clear = _fail_open(lambda: False)(RedisCacheClient.clear)


class FailOpenRedisCache(RedisCache):
    """`django.core.cache.backends.redis.RedisCache` with FailOpenRedisCacheClient underneath."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = FailOpenRedisCacheClient


def count_in_window(key: str, window_s: int, now: float) -> tuple[int, int] | None:
    """Count one more event under `key` in the current fixed window; (this window's count, the last one's).

    One round trip to Redis (INCR, EXPIRE and the previous window's GET in a pipeline) under the default
    cache's key prefix, so `cache.clear()` resets counts too. None while Redis is unavailable (fail open).
    Another cache backend (a settings override) is counted through Django's cache API instead.
    """
    from django.core.cache import cache

    window = int(now // window_s)
    current, previous = (f"{key}:{index}" for index in (window, window - 1))
    client = getattr(cache, "_cache", None)
    if not isinstance(client, FailOpenRedisCacheClient):
        cache.add(current, 0, 2 * window_s)
        return cache.incr(current), cache.get(previous, 0)
    outage = outage_of(client._servers[0])
    if outage.down():
        return None
    try:
        pipeline = client.get_client(write=True).pipeline(transaction=False)
        current = cache.make_and_validate_key(current)
        pipeline.incr(current).expire(current, 2 * window_s).get(cache.make_and_validate_key(previous))
        counted, _, before = pipeline.execute()
    except UNAVAILABLE as error:
        outage.failed(error)
        return None
    return int(counted), int(before or 0)


def uncount_in_window(key: str, window_s: int, now: float) -> None:
    """Take back one `count_in_window` of this window (a refused request does not count)."""
    from django.core.cache import cache

    with contextlib.suppress(ValueError):  # gone already (expired, or the cache was cleared): nothing to take back
        cache.decr(f"{key}:{int(now // window_s)}")  # fails open, as every command of FailOpenRedisCacheClient
