"""Pacing a simulated chip, honestly: it may only ever add waiting.

A simulated rank computes its micro-batch for real, then waits until the chip's modelled time
for those tokens has passed since the step began. If the real work took longer, the step just
takes longer: pacing only ever adds waiting, and every reported number is still measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Pacer:
    """Stretches each step to `tokens / tokens_per_s` seconds; a no-op without a modelled speed."""

    def __init__(
        self,
        tokens_per_s: float | None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if tokens_per_s is not None and tokens_per_s <= 0:
            raise ValueError(f"paced_tokens_per_s must be positive, got {tokens_per_s}")
        self.tokens_per_s, self.clock, self.sleep = tokens_per_s, clock, sleep

    def modelled_seconds(self, tokens: int) -> float:
        """How long the simulated chip takes for `tokens` (0 when not simulating)."""
        return tokens / self.tokens_per_s if self.tokens_per_s else 0.0

    def wait(self, step_started: float, tokens: int) -> float:
        """Sleep out the rest of the modelled step time; returns the seconds slept."""
        remaining = step_started + self.modelled_seconds(tokens) - self.clock()
        if remaining <= 0:
            return 0.0
        self.sleep(remaining)
        return remaining
