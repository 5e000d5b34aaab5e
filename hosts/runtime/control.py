"""The agent's requests to a running job, read by rank 0 at every step boundary.

The agent writes `<run_dir>/control.json` (atomically: write then rename):
    {"checkpoint": n, "stop": bool, "stop_checkpoint": bool, "export": bool, "epoch": e}
- a checkpoint is requested when n is larger than the last n acted on (0 at start);
- stop ends the run after this step, checkpointing first unless "stop_checkpoint" is false;
- "export" (default true) exports the model (Hugging Face format) with a stop checkpoint;
- an "epoch" other than this rank's launch epoch marks a file left by an older placement,
  which is ignored (the platform's fencing, applied to the control file too).
Rank 0 alone reads it and broadcasts the decision, so every rank acts at the same step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kernel.protocol import CONTROL_FILE


@dataclass(frozen=True)
class Request:
    """What to do at this step boundary."""

    checkpoint: bool = False
    stop: bool = False
    export: bool = True


class ControlFile:
    """Reads control.json and remembers which checkpoint request it already acted on."""

    def __init__(self, run_dir: str | Path, epoch: int) -> None:
        self.path = Path(run_dir) / CONTROL_FILE
        self.epoch = epoch
        self.acted_on = 0

    def poll(self) -> Request:
        data = self._read()
        if not data or data.get("epoch", self.epoch) != self.epoch:
            return Request()
        number = _int(data.get("checkpoint"))
        wanted = number > self.acted_on
        self.acted_on = max(self.acted_on, number)
        stop = data.get("stop") is True
        if stop and data.get("stop_checkpoint", True) is not False:
            wanted = True
        return Request(checkpoint=wanted, stop=stop, export=data.get("export", True) is not False)

    def _read(self) -> dict:
        """The file's object, or {} when it is absent or half-written (read again next step)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
