"""The rank's events: one JSON object per line on stdout, flushed at once.

The node agent turns each line into a Report (`kernel/protocol.py`); anything that is not a
JSON object is a log line. Libraries (DeepSpeed above all) print to stdout too, so
`claim_stdout` gives the events a private copy of the stdout descriptor and points the
process's own stdout at stderr: a library's half-written line can never split an event.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, TextIO


def claim_stdout() -> TextIO:
    """A stream on the original stdout for events only; everything else printed goes to stderr."""
    sys.stdout.flush()
    events = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return events


class EventStream:
    """Writes this rank's events in the protocol's field names."""

    def __init__(self, rank: int, stream: TextIO | None = None) -> None:
        self.rank = rank
        self.stream = stream or sys.stdout

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "rank": self.rank, **fields, "t": round(time.time(), 3)}
        record = {key: _plain(value) for key, value in record.items()}
        self.stream.write(json.dumps(record, allow_nan=False) + "\n")
        self.stream.flush()

    def metric(self, **fields: Any) -> None:
        """step, loss, tokens, tokens_per_s, step_time_s, samples_seen, memory_mb."""
        self.emit("metric", **fields)

    def checkpoint(
        self,
        step: int,
        path: str,
        seconds: float,
        stopping: bool = False,
        loss: float | None = None,
        eval_loss: float | None = None,
    ) -> None:
        """`stopping`: the last checkpoint before the ranks stop (the one a reclaim notice asked for). `loss`:
        the global train loss of the step saved; `eval_loss`: the held-out loss, when it was measured at it."""
        self.emit(
            "checkpoint",
            step=step,
            path=path,
            seconds=round(seconds, 4),
            stopping=stopping,
            loss=loss,
            eval_loss=eval_loss,
        )

    def eval(self, step: int, eval_loss: float | None, eval_tokens: int) -> None:
        """The held-out loss after `step`: mean cross-entropy over the eval records' target tokens."""
        self.emit("eval", step=step, eval_loss=eval_loss, eval_tokens=eval_tokens)

    def done(self, step: int, loss: float | None, **extra: Any) -> None:
        self.emit("done", step=step, loss=loss, **extra)


def _plain(value: Any) -> Any:
    """A JSON-safe value: tensor scalars unwrapped, NaN/inf as null, paths as strings."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str | list | dict):
        return value
    return str(value)
