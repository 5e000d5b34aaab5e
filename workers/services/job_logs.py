"""Reading a job's log lines: pages by id cursor, a live tail, and a bounded case-insensitive search.

The job page and `GET /api/v1/jobs/{id}/logs/` share these rules. Cursors are line ids (a line's id only
grows), so a page stays put while new lines arrive, and following a job fetches only the lines after the
last id seen. A search is a case-insensitive substring (SQL wildcards in it are matched literally).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from fleet.models import Job
from workers.models import JobLogLine

MAX_SEARCH = 200  # characters: enough for any real line fragment, and a bound on the LIKE pattern
PAGE_LINES = 200  # a page of the job page's log view
MAX_LINES = 1000  # the most lines one request returns


class LogQueryError(ValueError):
    """A log query that can't be answered; `field` names the parameter at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def clean_search(value: str | None) -> str:
    """The search text as given (spaces kept: they can matter in a line); refused when too long or holding a
    NUL, which no log line can contain and PostgreSQL can't compare."""
    value = value or ""
    if len(value) > MAX_SEARCH:
        raise LogQueryError("search", _("search is limited to %(most)s characters.") % {"most": MAX_SEARCH})
    if "\x00" in value:
        raise LogQueryError("search", _("search must not contain a NUL character."))
    return value


def clean_cursor(name: str, value: str | None) -> int | None:
    """A line id from a query string: a non-negative integer, or None when absent."""
    if value in (None, ""):
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise LogQueryError(name, _("%(name)s must be a line id (a non-negative integer).") % {"name": name})
    return int(value)


def matching(job: Job, search: str = ""):
    lines = job.log_lines.all()
    return lines.filter(line__icontains=search) if search else lines


def lines_after(job: Job, after: int, *, search: str = "", limit: int = PAGE_LINES) -> list[JobLogLine]:
    """The first `limit` lines with an id above `after`, oldest first: the next page, or new lines to follow."""
    return list(matching(job, search).filter(pk__gt=after).order_by("id")[:limit])


def lines_before(job: Job, before: int | None, *, search: str = "", limit: int = PAGE_LINES) -> list[JobLogLine]:
    """The last `limit` lines with an id below `before` (None: the newest lines), oldest first."""
    lines = matching(job, search)
    if before is not None:
        lines = lines.filter(pk__lt=before)
    return list(reversed(lines.order_by("-id")[:limit]))


@dataclass(frozen=True)
class LogPage:
    """One page of the job page's log view. `follow`: the newest page, kept up to date as lines arrive."""

    lines: list[JobLogLine]
    search: str
    total: int  # lines matching the search, on every page
    has_older: bool
    has_newer: bool
    follow: bool

    @property
    def first_id(self) -> int | None:
        return self.lines[0].pk if self.lines else None

    @property
    def last_id(self) -> int:
        return self.lines[-1].pk if self.lines else 0


def log_page(job: Job, *, search: str = "", before: int | None = None, after: int | None = None) -> LogPage:
    """The page before a line id, after one, or (neither) the newest page, which follows the job."""
    if before is not None and after is not None:
        raise LogQueryError("before", _("Give before or after, not both."))
    if after is not None:
        lines = lines_after(job, after, search=search, limit=PAGE_LINES + 1)
        has_newer, lines = len(lines) > PAGE_LINES, lines[:PAGE_LINES]
        has_older = matching(job, search).filter(pk__lte=after).exists()
    else:
        lines = lines_before(job, before, search=search, limit=PAGE_LINES + 1)
        has_older, lines = len(lines) > PAGE_LINES, lines[-PAGE_LINES:]
        has_newer = before is not None and matching(job, search).filter(pk__gte=before).exists()
    follow = after is None and before is None
    return LogPage(lines, search, matching(job, search).count(), has_older, has_newer, follow)
