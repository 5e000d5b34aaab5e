"""Heartbeats of many agents written in one UPDATE per second instead of one per poll.

Why: at 2,000 agents the polls alone are ~100/s; an UPDATE (and a re-read of the status) per poll
is most of the database's work while nothing changes but `last_heartbeat_at`. The lost-node
reconciler only needs that timestamp within the heartbeat deadline, so the agent service notes
each poll here and `flush()` writes all of them at once (node_lifecycle.record_heartbeats), with
node_lifecycle.record_heartbeat's rule: a draining or lost node keeps its status (decided on the row
as it is when written), any other becomes online. A row is written only while the node token that
polled is still the node's (a re-enrolled or reset node is not kept alive by an old token's last polls).

The rare polls that change more than the timestamp are written at once, by record_heartbeat
itself: a node known to be lost (it comes back only after a clean return, checked there), one
not yet online or draining, and a node whose observed address moved.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.db import DatabaseError
from django.utils import timezone

from base.outage import note_database_error
from fleet.choices import AgentStatus
from fleet.models import Node
from workers.services.node_lifecycle import record_heartbeat, record_heartbeats

logger = logging.getLogger(__name__)


class HeartbeatBatch:
    """Last poll per node since the last flush; thread-safe (polls note from the service's DB threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[datetime, dict, str]] = {}
        self.written = 0  # rows written by flushes so far (the benchmark reads it)

    def note(self, node: Node, health: dict, ranks: list, seen_address: str | None) -> None:
        """A node_lifecycle.record_heartbeat for the agent service: batched, unless this poll changes more."""
        moved = bool(node.address_observed and seen_address and seen_address != node.address)
        if moved or node.agent_status not in (AgentStatus.ONLINE, AgentStatus.DRAINING):
            record_heartbeat(node, health, ranks, seen_address=seen_address)
            return
        with self._lock:
            self._seen[node.pk] = (timezone.now(), health, node.token_hash or "")

    def pending(self) -> int:
        return len(self._seen)

    def flush(self) -> int:
        """Write every noted heartbeat in one statement; the rows written. On a database error the
        notes are kept (a newer note of a node wins) and the next flush tries again."""
        with self._lock:
            batch, self._seen = self._seen, {}
        if not batch:
            return 0
        try:
            written = record_heartbeats(batch)
        except DatabaseError as error:
            logger.exception("heartbeats of %d node(s) not written; retrying at the next flush", len(batch))
            note_database_error(error)  # these nodes polled: their silence now is the platform's
            with self._lock:
                self._seen = {**batch, **self._seen}
            return 0
        self.written += written
        return written
