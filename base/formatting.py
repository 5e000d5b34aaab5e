"""Values for people, other than money (`kernel.money`): durations, rates, comparisons, search hits.

Durations have one format on every page (`format_duration`, the `duration` template filter): two
units at most, the second left out when it is zero, never zero-padded; tenths of a second only below
ten seconds, where they matter (a move's downtime):

    "7.2 s", "45 s", "12 min", "1 min 40 s", "3 h", "3 h 12 min", "2 d 4 h".

The larger unit is whole, the smaller one truncated, so "49 min 59 s" never reads as "50 min".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

NONE = "—"
MINUTE, HOUR, DAY = 60, 3600, 86400


def format_duration(seconds: float | None) -> str:
    """A duration in seconds for people (see the module's docstring); a dash for none."""
    if seconds is None:
        return NONE
    seconds = max(seconds, 0.0)
    if round(seconds, 1) < 10:
        return f"{round(seconds, 1):g} s"
    whole = round(seconds)
    for unit, name, smaller, small_name in ((DAY, "d", HOUR, "h"), (HOUR, "h", MINUTE, "min"), (MINUTE, "min", 1, "s")):
        if whole >= unit:
            big, rest = divmod(whole, unit)
            small = rest // smaller
            return f"{big} {name} {small} {small_name}" if small else f"{big} {name}"
    return f"{whole} s"


def format_rate(value: float | None) -> str:
    """A count or a rate, compact: "812", "45.6k", "1.23M"; a dash for none."""
    if value is None:
        return NONE
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def speed_phrase(ratio: float | None) -> str:
    """A speed against a baseline, as a reader says it: "1.8× faster", "as fast"; empty for none."""
    if ratio is None:
        return ""
    if ratio >= 1.05:
        return gettext("%(ratio)s× faster") % {"ratio": f"{ratio:.1f}"}
    return gettext("%(ratio)s× slower") % {"ratio": f"{1 / ratio:.1f}"} if ratio <= 0.95 else gettext("as fast")


def cost_phrase(ratio: float | None) -> str:
    """The per-token cost against the baseline, as a reader says it: "20% cheaper per token"."""
    if ratio is None:
        return ""
    percent = round(abs(1 - ratio) * 100)
    if percent == 0:
        return gettext("the same cost per token")
    if ratio < 1:
        return gettext("%(percent)s%% cheaper per token") % {"percent": percent}
    return gettext("%(percent)s%% dearer per token") % {"percent": percent}


def highlight(text: str, search: str) -> SafeString:
    """The text, escaped, with each case-insensitive occurrence of the search marked."""
    if not search:
        return escape(text)
    pattern = re.compile(re.escape(search), re.IGNORECASE)
    pieces, start = [], 0
    for found in pattern.finditer(text):
        pieces += [escape(text[start : found.start()]), f"<mark>{escape(found[0])}</mark>"]
        start = found.end()
    pieces.append(escape(text[start:]))
    return mark_safe("".join(pieces))  # every piece of the text is escaped


def format_chip_counts(chip_counts: dict[str, dict[str, int]]) -> str:
    """A mix's chips per type (whatever their mode): "2 × rtx-4090 + 1 × tpu-v5e"."""
    return " + ".join(f"{sum(modes.values())} × {chip}" for chip, modes in sorted(chip_counts.items()))


def quote_accuracy(uncertainty: float | None, overhead_seconds: float) -> str:
    """How far a quote may be off, in words: from what its nodes measured (±), or why that is unknown."""
    within = f"{uncertainty:.0%}" if uncertainty is not None else ""
    if uncertainty is not None and overhead_seconds:
        return gettext(
            "Estimated from what these nodes delivered on this model and %(overhead)s of start-up and finishing: "
            "expect within ±%(within)s."
        ) % {"overhead": format_duration(overhead_seconds), "within": within}
    if uncertainty is not None:
        return gettext("Estimated from what these nodes delivered on this model: expect within ±%(within)s.") % {
            "within": within
        }
    if overhead_seconds:
        return gettext(
            "No measurements yet for this model on some of these nodes: the speed comes from the chip's modelled "
            "figure and start-up and finishing (%(overhead)s) as measured there for other models, so the ETA and "
            "total may be off by 2× or more. Quotes sharpen once a run has finished here."
        ) % {"overhead": format_duration(overhead_seconds)}
    return gettext(
        "No measurements yet for this model on some of these nodes: the speed comes from the chip's modelled "
        "figure and start-up is not counted, so the ETA and total may be off by 2× or more. Quotes sharpen once a "
        "run has finished here."
    )


def zone_label(moment: datetime) -> str:
    """The offset of an aware local time, as people read it: "UTC+8", "UTC+5:30", "UTC"."""
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    if minutes == 0:
        return "UTC"
    sign = "+" if minutes > 0 else "−"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours}:{rest:02d}" if rest else f"UTC{sign}{hours}"


def format_when(moment: datetime | None, part: str = "DATETIME_FORMAT", zone: bool = True) -> SafeString | str:
    """A time for a page, in the person's own time zone and language, with its zone: a `<time>` element
    whose `datetime` is the UTC instant ("2026年12月7日 14:05 UTC+8", "2026-12-07 14:05 UTC+8"). `part` is
    one of Django's format names (DATETIME_FORMAT, DATE_FORMAT, TIME_FORMAT); a dash for none."""
    if moment is None:
        return NONE
    local = timezone.localtime(moment)
    text = date_format(local, part)
    if zone:
        text = f"{text} {zone_label(local)}"
    return format_html('<time datetime="{}">{}</time>', moment.astimezone(UTC).isoformat(), text)
