"""Node-token checks remembered for a few seconds by the agent service.

Why: every poll and report carries the node token; at 2,000 agents a query per request to find
its node is needless work. A node found for a token is trusted for `ttl_s`
(settings.AGENT_AUTH_CACHE_S): a re-enrollment (which rotates the token) or an operator's reset
refuses the old token within that long, and a node's status and address as this cache knows them
are at most that old. Unknown tokens are never remembered, so a new token works at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from base.tokens import hash_token
from fleet.models import Node

# What a poll or a report reads of its node (the rest is loaded if ever touched): node_lifecycle.record_heartbeat's,
# restarts.move_jobs_of_vanished_ranks' and reports.accept_report's fields.
POLL_FIELDS = (
    "id",
    "hostname",
    "pool_id",
    "chips",
    "agent_status",
    "last_heartbeat_at",
    "token_hash",
    "address",
    "address_observed",
)


class NodeTokenCache:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic, max_entries: int = 100_000):
        self.ttl_s, self._clock, self._max_entries = ttl_s, clock, max_entries
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[float, Node]] = {}

    def cached(self, raw: str) -> Node | None:
        """The node if this token was checked within ttl_s (no database), else None."""
        entry = self._nodes.get(hash_token(raw))
        if entry is None or self._clock() >= entry[0]:
            return None
        return entry[1]

    def check(self, raw: str) -> Node | None:
        """The token's node, from the database (then remembered), or None when no node has it."""
        token_hash = hash_token(raw)
        node = _node_for_polls(token_hash)
        if node is not None and self.ttl_s > 0:
            with self._lock:
                if len(self._nodes) >= self._max_entries:
                    self._nodes.clear()
                self._nodes[token_hash] = (self._clock() + self.ttl_s, node)
        return node

    def forget_node(self, node_id: int) -> None:
        """A node re-enrolled through this process: its old token is refused here at once."""
        with self._lock:
            self._nodes = {key: entry for key, entry in self._nodes.items() if entry[1].pk != node_id}


def _node_for_polls(token_hash: str) -> Node | None:
    """enrollment.authenticate_node for the hot path: the POLL_FIELDS only, on the token's unique index."""
    return Node.objects.only(*POLL_FIELDS).filter(token_hash=token_hash).first()
