"""How fast this machine's CPU is right now, as one number to print beside a benchmark's table.

The development machine is a shared virtual machine whose speed drifts (`loop_ms()` gave 174-257 ms
within an hour): CPU seconds per request move with it. A row's figures are comparable with another
run's only together with this number (lower is faster).
"""

from __future__ import annotations

import time


def loop_ms(repeats: int = 3) -> float:
    """The fastest of `repeats` runs of a fixed pure-Python loop (3 million multiply-adds), in CPU ms."""
    best = float("inf")
    for _ in range(repeats):
        started, total = time.process_time(), 0
        for i in range(3_000_000):
            total += i * i
        best = min(best, time.process_time() - started)
    return best * 1000
