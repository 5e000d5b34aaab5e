"""Object ids and cursor pages as OpenAI writes them.

Ids are the Starverse row's number behind OpenAI's prefix: `file-12` is dataset 12, `ftjob-7` job 7,
`ftevent-90` job event 90, `ftckpt-3` checkpoint 3. A list answers {"object": "list", "data", "first_id",
"last_id", "has_more"}; `after` is the id of the last object of the previous page and `limit` the page's size.
"""

from __future__ import annotations

import re
from datetime import datetime

from openai_api.errors import invalid, not_found

FILE, JOB, EVENT, CHECKPOINT = "file", "ftjob", "ftevent", "ftckpt"
NOUNS = {FILE: "File", JOB: "fine-tuning job", EVENT: "event", CHECKPOINT: "checkpoint"}
ID = re.compile(r"^([a-z]+)-([0-9]{1,18})$")


def object_id(prefix: str, pk: int) -> str:
    return f"{prefix}-{pk}"


def pk_of(prefix: str, value: str | None) -> int | None:
    """The row number of an id with this prefix; None for anything else."""
    match = ID.match(value or "")
    return int(match[2]) if match and match[1] == prefix else None


def pk_or_404(prefix: str, value: str, param: str = "id") -> int:
    pk = pk_of(prefix, value)
    if pk is None:
        raise not_found(f"No such {NOUNS[prefix]}: {value!r}.", param=param)
    return pk


def unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def page_params(request, prefix: str, *, default: int = 20, most: int = 100) -> tuple[int | None, int]:
    """(the row number after which the page starts, its size) from ?after= and ?limit=; 400s name them."""
    after_id = request.query_params.get("after") or None
    after = pk_of(prefix, after_id)
    if after_id is not None and after is None:
        raise invalid("after", f"after must be the id of a {NOUNS[prefix]} ({prefix}-<n>), not {after_id!r}.")
    raw = request.query_params.get("limit") or ""
    if not raw:
        return after, default
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= most:
        raise invalid("limit", f"limit must be a whole number from 1 to {most}, not {raw!r}.")
    return after, int(raw)


def cursor_page(rows, after: int | None, limit: int, render, *, newest_first: bool = True) -> dict:
    """One page of `rows` (a queryset) after the row `after`, in id order, each shown by `render`."""
    if after is not None:
        rows = rows.filter(pk__lt=after) if newest_first else rows.filter(pk__gt=after)
    picked = list(rows.order_by("-pk" if newest_first else "pk")[: limit + 1])
    data = [render(row) for row in picked[:limit]]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(picked) > limit,
    }
