"""Let a niced process's nice value count under Linux's autogroup scheduling.

With autogroup (`/proc/sys/kernel/sched_autogroup_enabled`, on by default on many distributions)
the kernel shares CPU time between sessions first, and a nice value only orders processes inside
one session. The node agent and every training rank start a session of their own, so `nice -n 19`
alone would not let a busy demo fleet yield the CPU to the web tier on the same machine: four rank
sessions would get four shares to the web server's one. Writing the nice value to
`/proc/self/autogroup` gives the whole session that priority. Plain Python: the agent and the
runtime import it.
"""

from __future__ import annotations

import os

AUTOGROUP = "/proc/self/autogroup"


def carry_nice_to_session() -> None:
    """Give this process's session the process's own nice value (when it is niced at all)."""
    nice = os.nice(0)
    if nice <= 0:
        return
    try:
        with open(AUTOGROUP, "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:  # no autogroup support, or not allowed: plain nice still orders this session
        pass
