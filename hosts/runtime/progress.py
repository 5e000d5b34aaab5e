"""What a rank says in the job's log while it trains, and what the libraries under it may say.

Rank 0 writes a human line with the step, the loss and the job's tokens/s: on the first step, the last,
and at most every `EVERY_S` seconds between (a log line per step of a fast job would drown the rest).
The metric events carry every step for the charts; these lines are for people reading the log.

Libraries are told to keep quiet before they are imported: transformers' and the Hub's progress bars
and advisories, and the warnings that torch, DeepSpeed, transformers and peft raise about themselves.
What still gets through is folded away on the job page (kernel/logtext.py).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable

EVERY_S = 10.0
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
    "RUST_LOG": "warn",  # torchft's Manager and Lighthouse client log every quorum at info level
}
LIBRARIES = r"(torch|torchft|deepspeed|transformers|peft|accelerate|huggingface_hub|safetensors)(\.|$)"


def quiet_libraries() -> None:
    """Before torch, DeepSpeed or transformers are imported: no progress bars, advisories or their own warnings."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", module=LIBRARIES)
    # torchft's Manager warns at every quorum that it can't reset NCCL's flight recorder (there is none on
    # gloo); its errors still show.
    logging.getLogger("torchft").setLevel(logging.ERROR)


def progress_line(step: int, max_steps: int, loss: float | None, tokens_per_s: float, step_s: float) -> str:
    """ "step 50/200 · loss 2.5000 · 12,345 tokens/s · 0.21 s/step" """
    shown = f"{loss:.4f}" if loss is not None else "—"
    return f"step {step}/{max_steps} · loss {shown} · {tokens_per_s:,.0f} tokens/s · {step_s:.2f} s/step"


class ProgressLog:
    """Decides which steps get a line: the first, the last, and one every `every_s` seconds between."""

    def __init__(self, max_steps: int, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_steps, self.every_s, self.clock = max_steps, every_s, clock
        self.last: float | None = None

    def due(self, step: int) -> bool:
        now = self.clock()
        if step in (1, self.max_steps) or self.last is None or now - self.last >= self.every_s:
            self.last = now
            return True
        return False
