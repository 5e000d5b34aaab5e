"""Turns a rank's stdout/stderr into Report items (kernel/protocol.py, "Report").

A rank prints one JSON object per event on stdout; every other line is a log line. Logs are
capped in length and rate-limited per rank, because a rank stuck in a print loop must not flood
the platform (or the agent's memory while the platform is away); what is dropped is counted and
said in a "[N lines dropped]" marker. Each log line (and the stderr tail an exit carries) leaves
the host without its server paths (kernel/logtext.py: the run folder reads <run>, the cache
<cache>, site-packages <site-packages>), and a progress bar redrawn with carriage returns as its
last frame only.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO

from kernel.logtext import progress_frame
from kernel.protocol import ReportKind

MAX_LINE = 2000
READ_CAP = 65536  # an event line longer than this is not an event
STDERR_TAIL = 20
EVENT_FIELDS = {
    ReportKind.METRIC: (
        "step",
        "loss",
        "tokens",
        "tokens_per_s",
        "step_time_s",
        "samples_seen",
        "memory_mb",
        "t",
    ),
    ReportKind.CHECKPOINT: ("step", "path", "seconds", "stopping", "loss", "eval_loss", "t"),
    ReportKind.EVAL: ("step", "eval_loss", "eval_tokens", "t"),
    ReportKind.ISLAND: (
        "step",
        "island",
        "change",
        "members",
        "syncs",
        "bytes_across",
        "bridge_gbps",
        "stack",
        "mode",
        "t",
    ),
    ReportKind.SERVING: ("state", "url", "engine", "simulated", "device", "error", "t"),
}
DONE = "done"


def capped_lines(stream: IO[str], cap: int = READ_CAP) -> Iterator[str]:
    """Lines without their newline or NUL characters; a line longer than `cap` is cut and its rest skipped."""
    while True:
        piece = stream.readline(cap)
        if not piece:
            return
        line = piece.rstrip("\r\n")
        while piece and not piece.endswith("\n"):
            piece = stream.readline(cap)
        # The platform refuses NUL characters (PostgreSQL can't store them): one printed by a rank
        # would get the whole report batch refused, so it travels as U+FFFD.
        yield line.replace("\x00", "\ufffd")


def parse_event(line: str, rank: int) -> dict | str | None:
    """A Report item for a metric/checkpoint event, DONE for "done", None when not an event."""
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    kind = event.get("event")
    if kind == DONE:
        return DONE
    if kind not in EVENT_FIELDS:
        return None
    item = {"kind": kind, "rank": rank}
    item.update({key: event[key] for key in EVENT_FIELDS[kind] if key in event})
    item.setdefault("t", time.time())
    return item


class RateLimit:
    """Token bucket: `rate` lines per second, bursts up to `rate`."""

    def __init__(self, rate: float) -> None:
        self.rate, self.tokens, self.last = rate, rate, time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class RankOutput:
    """The per-rank parser that both reader threads feed; `emit` receives Report items."""

    def __init__(
        self, rank: int, emit: Callable[[dict], None], log_rate: float = 50.0, scrub: Callable[[str], str] = str
    ) -> None:
        self.rank, self.emit, self.scrub = rank, emit, scrub
        self.limit = RateLimit(log_rate)
        self.dropped = 0
        self.events = 0
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._lock = threading.Lock()

    def stdout_line(self, line: str) -> None:
        event = parse_event(line, self.rank)
        if event is None and (line := self.clean(line)) is not None:
            self._log(line)
        elif event != DONE:
            with self._lock:
                self.events += 1
            self.emit(event)

    def stderr_line(self, line: str) -> None:
        if (line := self.clean(line)) is None:
            return
        self.stderr_tail.append(line[:MAX_LINE])
        self._log(line)

    def clean(self, line: str) -> str | None:
        """The line as people may read it: a progress bar's last frame, no server paths; None for a line of
        carriage returns and blanks only."""
        frame = progress_frame(line)
        return None if frame != line and not frame.strip() else self.scrub(frame)

    def _log(self, line: str) -> None:
        with self._lock:
            if not self.limit.allow():
                self.dropped += 1
                return
            dropped, self.dropped = self.dropped, 0
        if dropped:
            self._emit_dropped(dropped)
        self.emit({"kind": ReportKind.LOG, "rank": self.rank, "line": line[:MAX_LINE], "t": time.time()})

    def _emit_dropped(self, count: int) -> None:
        line = f"[{count} lines dropped]"
        self.emit({"kind": ReportKind.LOG, "rank": self.rank, "line": line, "t": time.time()})

    def exit_item(self, code: int) -> dict:
        """Flush the dropped-lines count, then the exit item carrying the last stderr lines."""
        with self._lock:
            dropped, self.dropped = self.dropped, 0
        if dropped:
            self._emit_dropped(dropped)
        error = "\n".join(self.stderr_tail) if code != 0 else ""
        return {"kind": ReportKind.EXIT, "rank": self.rank, "code": code, "error": error, "t": time.time()}
