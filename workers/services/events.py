"""Recording what happened to a job, and reading it back as the job page's timeline.

A job saves a checkpoint every few hundred steps, so its raw event list is mostly "Checkpointed"; the
timeline folds each run of consecutive checkpoint events into one entry ("Checkpoint saved ×12, last at
step 240") so the events that matter (placed, moved, stopped) stay on screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q
from django.utils import timezone
from django.utils.translation import gettext

from base.stored_text import StoredText, render
from fleet.choices import JobEventKind
from fleet.models import Job
from workers.models import JobEvent

TIMELINE_LIMIT = 50
READ_BATCH = 200  # events read per query while folding: a flood of checkpoints takes a few reads, not one each
STEP = re.compile(r"step[- ](\d+)")


def record_event(
    job: Job, kind: str, message: str | StoredText = "", *, data: dict | None = None, now=None
) -> JobEvent:
    """A timeline event. A StoredText message is stored in English (`message`, what the API returns) and as
    its msgid and values (`data["text"]`), which the timeline renders in the reader's language."""
    data = dict(data or {})
    if isinstance(message, StoredText):
        data["text"] = message.as_data()
        message = message.english()
    return JobEvent.objects.create(
        job=job,
        kind=kind,
        message=message,
        data=data,
        epoch=job.epoch,
        created_at=now or timezone.now(),
    )


@dataclass(frozen=True)
class TimelineEntry:
    """One line of the timeline: an event, or `count` consecutive checkpoint events folded together."""

    kind: str
    label: str
    message: str
    created_at: datetime  # the newest event's time
    count: int = 1
    first_at: datetime | None = None  # the oldest folded event's time


@dataclass(frozen=True)
class Timeline:
    entries: list[TimelineEntry]  # newest first
    total_events: int  # every event of the job, shown or not

    @property
    def truncated(self) -> bool:
        return self.total_events > sum(entry.count for entry in self.entries)


def checkpoint_step(event: JobEvent) -> int | None:
    """The step a checkpoint event saved: its data's `step`, else the `step-<n>` of its path or message."""
    if isinstance(event.data.get("step"), int):
        return event.data["step"]
    for text in (str(event.data.get("path") or ""), event.message):
        if found := STEP.search(text):
            return int(found[1])
    return None


def timeline(job: Job, limit: int = TIMELINE_LIMIT) -> Timeline:
    """The newest `limit` timeline entries, newest first, each run of checkpoint events folded into one.

    Events are read newest first in batches; a run of checkpoints longer than a batch is counted in SQL
    instead of read row by row, so a job with thousands of checkpoints costs a few queries per poll."""
    events = job.events.order_by("-created_at", "-id")
    entries: list[TimelineEntry] = []
    run: _Run | None = None
    cursor: _Cursor | None = None
    exhausted = stopped_early = False
    while not (exhausted or stopped_early):
        batch = list(_older(events, cursor)[:READ_BATCH])
        exhausted = len(batch) < READ_BATCH
        for index, event in enumerate(batch):
            cursor = _Cursor(event.created_at, event.id)
            if event.kind == JobEventKind.CHECKPOINTED:
                run = run.add(event) if run else _Run(event)
                continue
            if run:
                entries.append(run.entry())
                run = None
                if len(entries) == limit:
                    stopped_early = True  # this event and older ones are left out
                    break
            entries.append(_single(event))
            if len(entries) == limit:
                stopped_early = not (exhausted and index == len(batch) - 1)
                break
        else:
            if run and not exhausted:
                cursor, exhausted = run.skip_ahead(events, cursor)
    if run:  # the oldest events were checkpoints
        entries.append(run.entry())
    shown = sum(entry.count for entry in entries)
    return Timeline(entries, job.events.count() if stopped_early else shown)


@dataclass(frozen=True)
class _Cursor:
    """Where reading stopped: older events come after (created_at, id) in newest-first order."""

    created_at: datetime
    id: int
    inclusive: bool = False


def _older(events, cursor: _Cursor | None):
    if cursor is None:
        return events
    same_time = Q(created_at=cursor.created_at, **{"id__lte" if cursor.inclusive else "id__lt": cursor.id})
    return events.filter(Q(created_at__lt=cursor.created_at) | same_time)


class _Run:
    """Consecutive checkpoint events being folded: the newest one, how many, the oldest one's time."""

    def __init__(self, newest: JobEvent) -> None:
        self.newest, self.count, self.first_at = newest, 1, newest.created_at

    def add(self, event: JobEvent) -> _Run:
        self.count += 1
        self.first_at = event.created_at
        return self

    def skip_ahead(self, events, cursor: _Cursor) -> tuple[_Cursor | None, bool]:
        """Count the rest of this run in SQL; the cursor moves to the event that ends it (None: the run
        reaches the job's first event)."""
        rest = _older(events, cursor)
        boundary = rest.exclude(kind=JobEventKind.CHECKPOINTED).values("created_at", "id").first()
        run = rest.filter(kind=JobEventKind.CHECKPOINTED)
        if boundary:
            at, pk = boundary["created_at"], boundary["id"]
            run = run.filter(Q(created_at__gt=at) | Q(created_at=at, id__gt=pk))
        counted = run.aggregate(count=Count("id"), first_at=Min("created_at"))
        self.count += counted["count"]
        self.first_at = counted["first_at"] or self.first_at
        if boundary is None:
            return None, True
        return _Cursor(boundary["created_at"], boundary["id"], inclusive=True), False

    def entry(self) -> TimelineEntry:
        if self.count == 1:
            return _single(self.newest)
        step = checkpoint_step(self.newest)
        if step is not None:
            message = gettext("Checkpoint saved ×%(count)s, last at step %(step)s") % {
                "count": self.count,
                "step": step,
            }
        else:
            message = gettext("Checkpoint saved ×%(count)s") % {"count": self.count}
        return TimelineEntry(
            JobEventKind.CHECKPOINTED,
            gettext("Checkpoints"),
            message,
            self.newest.created_at,
            count=self.count,
            first_at=self.first_at,
        )


def event_message(event: JobEvent) -> str:
    """The event's message in the active language (its stored English when it was stored as plain text)."""
    return render((event.data or {}).get("text"), event.message)


def _single(event: JobEvent) -> TimelineEntry:
    return TimelineEntry(event.kind, event.get_kind_display(), event_message(event), event.created_at)
