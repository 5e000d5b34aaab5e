"""Batches what ranks say and POSTs it to /report/ about every 0.5 s per job and epoch.

Queues survive platform outages (retry with backoff) but are bounded: when a queue overflows, the
oldest logs go first, then metrics; exit items are never dropped, because an exit is how the
platform learns that a rank died and what it said.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from hosts.agent.client import Backoff, PlatformClient, Rejected, StaleEpoch, Transient, Unauthorized
from kernel.protocol import ReportKind

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (job_id, epoch)
MAX_QUEUE = 5000
MAX_BATCH = 1000
_DROP_ORDER = (ReportKind.LOG, ReportKind.METRIC, ReportKind.EVAL, ReportKind.CHECKPOINT)


class Reporter:
    """A thread that owns the report queues; ranks call `put` from their reader threads."""

    def __init__(
        self,
        client: PlatformClient,
        token: Callable[[], str | None],
        on_stale: Callable[[int, int], None],
        interval_s: float = 0.5,
        max_queue: int = MAX_QUEUE,
    ) -> None:
        self.client, self.token, self.on_stale = client, token, on_stale
        self.interval_s, self.max_queue = interval_s, max_queue
        self._queues: dict[Key, deque] = {}
        self._dropped: dict[Key, int] = {}
        self._stale: set[Key] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, job_id: int, epoch: int, item: dict) -> None:
        key = (job_id, epoch)
        with self._lock:
            if key in self._stale:
                return
            queue = self._queues.setdefault(key, deque())
            queue.append(item)
            if len(queue) > self.max_queue:
                self._drop_one(key, queue)

    def _drop_one(self, key: Key, queue: deque) -> None:
        for kind in _DROP_ORDER:
            for index, item in enumerate(queue):
                if item.get("kind") == kind:
                    del queue[index]
                    self._dropped[key] = self._dropped.get(key, 0) + 1
                    return

    def pending(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def stop(self, flush_s: float = 0.0) -> None:
        """Stop the thread, first trying for up to `flush_s` to deliver what is queued."""
        if flush_s > 0 and self._thread.is_alive():
            self.flush(flush_s)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + 15)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queue is empty (the thread keeps sending); True if it got there."""
        waited = 0.0
        while self.pending() and waited < timeout_s:
            self._stop.wait(0.05)
            waited += 0.05
        return not self.pending()

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stop.wait(self.interval_s):
            try:
                ok = self._send_all()
            except Exception:  # never let one bad batch kill reporting for every job
                log.exception("report thread error")
                ok = False
            if ok:
                backoff.reset()
            elif self._stop.wait(backoff.next_delay()):
                return

    def _send_all(self) -> bool:
        """One pass over the queues; False when the platform could not be reached."""
        with self._lock:
            keys = [k for k, q in self._queues.items() if q]
        return all(self._send(key) for key in keys)

    def _take(self, key: Key) -> tuple[list[dict], int]:
        """The next batch (a 'dropped' marker first if overflow cost items) and the drop count."""
        with self._lock:
            queue = self._queues.get(key, deque())
            batch = [queue[i] for i in range(min(len(queue), MAX_BATCH))]
            dropped = self._dropped.get(key, 0)
        if dropped and batch:
            line = f"[{dropped} report items dropped while the platform was unreachable]"
            marker = {"kind": ReportKind.LOG, "rank": batch[0].get("rank", 0), "line": line}
            batch.insert(0, {**marker, "t": batch[0].get("t")})
        return batch, dropped

    def _send(self, key: Key) -> bool:
        (batch, dropped), token = self._take(key), self.token()
        if not batch or not token:
            return not batch
        body = {"job_id": key[0], "epoch": key[1], "items": batch}
        try:
            self.client.report(token, body)
        except (Transient, Unauthorized) as exc:
            log.warning("report for job %s epoch %s postponed: %s", *key, exc)
            return False
        except StaleEpoch:
            self._mark_stale(key)
            return True
        except Rejected as exc:
            log.error("report for job %s epoch %s rejected, dropping %d items: %s", *key, len(batch), exc)
        self._discard(key, batch, dropped)
        return True

    def _discard(self, key: Key, batch: list[dict], dropped: int) -> None:
        """Remove what was sent; by identity, since overflow may have dropped items meanwhile."""
        sent = {id(item) for item in batch}
        with self._lock:
            queue = self._queues.get(key)
            while queue and id(queue[0]) in sent:
                queue.popleft()
            if queue is not None and not queue:
                del self._queues[key]
            if dropped:
                self._dropped[key] = self._dropped.get(key, 0) - dropped
                if self._dropped[key] <= 0:
                    del self._dropped[key]

    def _mark_stale(self, key: Key) -> None:
        log.warning("job %s epoch %s is stale: stopping its ranks", *key)
        with self._lock:
            self._stale.add(key)
            self._queues.pop(key, None)
            self._dropped.pop(key, None)
        self.on_stale(*key)
