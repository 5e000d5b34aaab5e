"""Times on pages: the person's zone and language, with the offset; the instant in UTC for machines."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

from django.utils import timezone, translation

from base.formatting import format_when, zone_label

NOON_UTC = datetime(2026, 12, 7, 6, 5, tzinfo=UTC)


def test_a_time_shows_in_shanghai_with_its_offset_in_chinese():
    with timezone.override(zoneinfo.ZoneInfo("Asia/Shanghai")), translation.override("zh-hans"):
        html = format_when(NOON_UTC)
    assert html == '<time datetime="2026-12-07T06:05:00+00:00">2026年12月7日 14:05 UTC+8</time>'


def test_the_same_time_in_english_and_another_zone():
    with timezone.override(zoneinfo.ZoneInfo("Europe/Berlin")), translation.override("en"):
        assert ">2026-12-07 07:05 UTC+1<" in format_when(NOON_UTC)
        assert ">07:05:00 UTC+1<" in format_when(NOON_UTC, "TIME_FORMAT")


def test_zone_labels():
    assert zone_label(NOON_UTC) == "UTC"
    assert zone_label(NOON_UTC.astimezone(zoneinfo.ZoneInfo("Asia/Kolkata"))) == "UTC+5:30"
    assert zone_label(NOON_UTC.astimezone(zoneinfo.ZoneInfo("America/New_York"))) == "UTC−5"


def test_no_time_is_a_dash():
    assert format_when(None) == "—"
