"""The job page's log view: a page of lines, escaped and with the search marked, library noise folded away.

Runs of a library's lines (warnings, INFO logs, progress bars: kernel/logtext.py) are folded into one
collapsed group, so the rank's own lines (step, loss, tokens/s, errors) read at a glance; a search shows its
matches unfolded.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from django.utils.http import urlencode
from django.utils.safestring import SafeString

from base.formatting import highlight
from fleet.models import Job
from kernel.logtext import noise_flags
from workers.services import job_logs


@dataclass(frozen=True)
class LogLine:
    id: int
    rank: int
    html: SafeString


@dataclass(frozen=True)
class LogGroup:
    """Consecutive lines shown together: a library's, folded away (`folded`), or the rank's own."""

    lines: list[LogLine]
    folded: bool


def log_groups(lines, search: str) -> list[LogGroup]:
    """The lines in order, each run of library noise one folded group; nothing folded while searching."""
    shown = [LogLine(line.pk, line.rank, highlight(line.line, search)) for line in lines]
    flags = [False] * len(shown) if search else noise_flags((line.rank, line.line) for line in lines)
    runs = groupby(zip(shown, flags, strict=True), key=lambda pair: pair[1])
    return [LogGroup([line for line, _ in run], folded) for folded, run in runs]


def log_query(params) -> dict:
    """`search`, `before` and `after` from a query string, checked (LogQueryError names the one at fault)."""
    return {
        "search": job_logs.clean_search(params.get("search")),
        "before": job_logs.clean_cursor("before", params.get("before")),
        "after": job_logs.clean_cursor("after", params.get("after")),
    }


def log_context(job: Job, query: dict) -> dict:
    """The log view: one page of lines (the newest, followed live, by default) and its links."""
    page = job_logs.log_page(job, **query)
    search = {"search": page.search} if page.search else {}
    return {
        "job": job,
        "live": not job.is_finished,
        "log": page,
        "log_groups": log_groups(page.lines, page.search),
        "links": {
            "older": urlencode({**search, "before": page.first_id or 0}),
            "newer": urlencode({**search, "after": page.last_id}),
            "newest": urlencode(search),
        },
    }
