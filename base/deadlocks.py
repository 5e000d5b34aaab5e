"""Running a transaction again when PostgreSQL chose it as the victim of a deadlock.

Placement and the market take their locks in one order (docs/ARCHITECTURE.md, "Locks"), so they
don't deadlock each other; but PostgreSQL's foreign-key checks, triggers and code added later can
still close a cycle, and then PostgreSQL aborts one of the transactions ("deadlock detected") to
let the others go on. Its work was rolled back whole, so running it again is safe, and a second try
usually succeeds: the transaction it lost to has committed meanwhile.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg.errors
from django.db import OperationalError, connection

logger = logging.getLogger("base.deadlocks")

P = ParamSpec("P")
R = TypeVar("R")


def lost_a_deadlock(error: BaseException) -> bool:
    """Django wraps the driver's error in its own OperationalError; the driver's is its cause."""
    return isinstance(error, OperationalError) and isinstance(error.__cause__, psycopg.errors.DeadlockDetected)


def retry_on_deadlock(attempts: int = 3, pause_s: float = 0.05) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated transaction up to `attempts` times while it loses deadlocks.

    Only where the function's transaction is the outermost one: inside a caller's transaction the
    caller's own work was aborted too, so the error goes to the caller (whose own wrapper may retry).
    A short random pause first lets the winner commit, so the two don't meet again at once.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            for attempt in range(1, attempts):
                try:
                    return function(*args, **kwargs)
                except OperationalError as error:
                    if not lost_a_deadlock(error) or connection.in_atomic_block:
                        raise
                    logger.warning("%s lost a deadlock (attempt %d of %d)", function.__qualname__, attempt, attempts)
                    time.sleep(random.uniform(pause_s, 3 * pause_s) * attempt)
            return function(*args, **kwargs)  # the last attempt: what it raises goes to the caller

        return run

    return decorate
