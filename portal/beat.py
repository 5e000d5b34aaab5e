"""The beat's heartbeat: once a process starts as Celery beat, each task it publishes marks "beat".

/metrics reads that mark (base.heartbeats) to tell whether the beat is alive; nothing else records
a beat tick (the schedule file stays on the beat's own disk). A mark is one Redis write, a few a second.
"""

from __future__ import annotations

from typing import Any

from celery.signals import after_task_publish, beat_init

from base import heartbeats

BEAT = "beat"


@beat_init.connect
def mark_each_publish_of_this_beat(sender: Any = None, **kwargs: Any) -> None:
    """This process is the beat: mark now, and after every task it publishes."""
    heartbeats.mark(BEAT)
    after_task_publish.connect(mark_beat_tick, weak=False, dispatch_uid="starverse-beat-tick")


def mark_beat_tick(sender: Any = None, **kwargs: Any) -> None:
    heartbeats.mark(BEAT)
