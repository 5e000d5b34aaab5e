"""Heartbeats: the last time a periodic process did its work, and what it found, for /metrics.

`mark("meter")` after each meter run, `mark("ledger_audit", problems=0)` after each audit, and the
beat after each task it publishes (portal.beat). They live in the cache (Redis), so every process
sees every other's; a missing mark means "never, or not since Redis lost its data". Writing one
never fails its caller: the cache fails open while Redis is away (portal.cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache
from django.utils import timezone

KEY = "ops:heartbeat:{name}"


@dataclass(frozen=True)
class Heartbeat:
    """When `name` last beat, and the facts it left."""

    name: str
    at: datetime
    facts: dict[str, Any] = field(default_factory=dict)

    def age_seconds(self, now: datetime | None = None) -> float:
        return max(0.0, ((now or timezone.now()) - self.at).total_seconds())


def mark(name: str, now: datetime | None = None, **facts: Any) -> None:
    """Record that `name` did its work now (kept until the next mark)."""
    at = now or timezone.now()
    cache.set(KEY.format(name=name), {"at": at.timestamp(), "facts": facts}, timeout=None)


def forget(name: str) -> None:
    """Drop the mark of `name` (tests)."""
    cache.delete(KEY.format(name=name))


def last(name: str) -> Heartbeat | None:
    """The latest mark of `name`, or None when there is none."""
    stored = cache.get(KEY.format(name=name))
    if not isinstance(stored, dict) or "at" not in stored:
        return None
    return Heartbeat(name, datetime.fromtimestamp(stored["at"], tz=UTC), dict(stored.get("facts") or {}))
