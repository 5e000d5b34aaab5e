"""The deployment page's charts: its served requests (ServedRequest rows) in time buckets.

Latency is the median of each bucket (time to the first byte, the whole request); throughput is the
completion tokens served in a bucket over its length, beside each request's own speed (its completion
tokens over its duration), the median of the bucket. Buckets are sized so the window holds at most
MAX_BUCKETS of them; the window is the last day, from its first request, and at least MIN_SPAN.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from statistics import median

from django.utils import timezone

from fleet.models import Deployment, ServedRequest

WINDOW = timedelta(hours=24)
MIN_SPAN = timedelta(minutes=15)  # a few requests still get a readable time axis
MAX_ROWS = 20_000  # the newest requests of the window; older ones fall off the left of the charts
MAX_BUCKETS = 60
BUCKET_SECONDS = (10, 30, 60, 300, 900, 3600)


def bucket_seconds(span: timedelta) -> int:
    seconds = span.total_seconds()
    return next((size for size in BUCKET_SECONDS if seconds / size <= MAX_BUCKETS), BUCKET_SECONDS[-1])


def served_series(deployment: Deployment, now: datetime | None = None) -> dict:
    """{"bucket_s", "since", "now", "points": [{"at" (ms), "requests", "first_byte_p50_ms", "duration_p50_ms",
    "tokens_per_s", "request_tokens_per_s_p50"}]}: only buckets that had requests."""
    now = now or timezone.now()
    rows = list(
        ServedRequest.objects.filter(deployment=deployment, started_at__gte=now - WINDOW)
        .order_by("-started_at")
        .values_list("started_at", "first_byte_ms", "duration_ms", "completion_tokens", "status_code")[:MAX_ROWS]
    )
    since = min([*(row[0] for row in rows), now - MIN_SPAN])
    size = bucket_seconds(now - since)
    buckets: dict[int, list[tuple]] = defaultdict(list)
    for row in rows:
        buckets[int(row[0].timestamp()) // size * size].append(row)
    return {
        "bucket_s": size,
        "since": since.isoformat(),
        "now": now.isoformat(),
        "points": [bucket_point(start, size, buckets[start]) for start in sorted(buckets)],
    }


def bucket_point(start: int, size: int, rows: list[tuple]) -> dict:
    answered = [row for row in rows if row[4] < 400]
    first_bytes = [row[1] for row in answered if row[1] is not None]
    speeds = [row[3] / (row[2] / 1000) for row in answered if row[3] and row[2] > 0]
    return {
        "at": start * 1000,
        "requests": len(rows),
        "first_byte_p50_ms": round(median(first_bytes), 1) if first_bytes else None,
        "duration_p50_ms": round(median(row[2] for row in answered), 1) if answered else None,
        "tokens_per_s": round(sum(row[3] for row in answered) / size, 3),
        "request_tokens_per_s_p50": round(median(speeds), 2) if speeds else None,
    }
