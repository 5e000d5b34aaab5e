"""Requests in flight per deployment, in Redis: the gateway counts each request in and out, and the scaling
pass (workers.services.deployments.scale_deployments) adds a replica to a deployment whose ready replicas
have too many waiting. A count is a hint: while Redis is unreachable nothing here raises (no count, no
scale-up beyond the minimum), and a count left behind by a killed web process expires with its key.
"""

from __future__ import annotations

import logging

import redis

from workers.services.channel import _outage, _redis

INFLIGHT_KEY = "starverse:deployment-inflight"
KEY_TTL_S = 600  # a count nobody touched for this long is dropped (a killed process's leftovers)

log = logging.getLogger(__name__)


def request_started(deployment_id: int) -> None:
    _add(deployment_id, 1)


def request_finished(deployment_id: int) -> None:
    _add(deployment_id, -1)


def _add(deployment_id: int, delta: int) -> None:
    if _outage().down():
        return
    try:
        pipe = _redis().pipeline()
        pipe.hincrby(INFLIGHT_KEY, str(deployment_id), delta)
        pipe.expire(INFLIGHT_KEY, KEY_TTL_S)
        pipe.execute()
    except redis.RedisError as error:
        _outage().failed(error)
        log.warning("in-flight count of deployment %s not updated: %s", deployment_id, error)


def inflight() -> dict[int, int]:
    """Requests in flight by deployment id (never negative)."""
    if _outage().down():
        return {}
    try:
        counts = _redis().hgetall(INFLIGHT_KEY)
    except redis.RedisError as error:
        _outage().failed(error)
        return {}
    return {int(key): max(0, int(value)) for key, value in counts.items()}
