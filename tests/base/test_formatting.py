"""Values for people other than money: one duration format on every page, rates, comparisons, search hits."""

from __future__ import annotations

import pytest
from django.template import Context, Template

from base.formatting import (
    cost_phrase,
    format_chip_counts,
    format_duration,
    format_rate,
    highlight,
    quote_accuracy,
    speed_phrase,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (-3, "0 s"),
        (0, "0 s"),
        (7.24, "7.2 s"),  # a move's downtime: tenths matter below ten seconds
        (8.0, "8 s"),
        (9.96, "10 s"),
        (45.4, "45 s"),
        (60, "1 min"),
        (100, "1 min 40 s"),
        (125, "2 min 5 s"),  # never zero-padded
        (2981, "49 min 41 s"),
        (3599.6, "1 h"),
        (3 * 3600 + 12 * 60 + 59, "3 h 12 min"),  # the smaller unit truncated, never rounded up
        (3 * 3600, "3 h"),
        (30 * 3600, "1 d 6 h"),
        (3 * 86400, "3 d"),
    ],
)
def test_a_duration_reads_in_at_most_two_units(seconds, text):
    assert format_duration(seconds) == text


def test_the_duration_filter_is_the_same_format(db):
    template = Template("{% load formatting %}{{ downtime|duration }} · {{ eta|duration }} · {{ none|duration }}")
    assert template.render(Context({"downtime": 8.5, "eta": 2981.0, "none": None})) == "8.5 s · 49 min 41 s · —"


@pytest.mark.parametrize(
    ("value", "text"), [(None, "—"), (45.64, "45.6"), (812.4, "812"), (45_600, "45.6k"), (1.234e6, "1.23M")]
)
def test_rates_are_compact(value, text):
    assert format_rate(value) == text


def test_comparisons_read_as_a_reader_says_them():
    assert (speed_phrase(1.8), speed_phrase(1.0), speed_phrase(0.5), speed_phrase(None)) == (
        "1.8× faster",
        "as fast",
        "2.0× slower",
        "",
    )
    assert (cost_phrase(0.8), cost_phrase(1.0), cost_phrase(1.25)) == (
        "20% cheaper per token",
        "the same cost per token",
        "25% dearer per token",
    )


def test_a_mix_names_its_chips_per_type_whatever_their_mode():
    assert format_chip_counts({"tpu-v5e": {"spot": 1}, "rtx-4090": {"on_demand": 1, "spot": 1}}) == (
        "2 × rtx-4090 + 1 × tpu-v5e"
    )


def test_a_quotes_accuracy_names_its_start_up_as_a_duration():
    assert "and 2 min 5 s of start-up and finishing: expect within ±12%" in quote_accuracy(0.12, 125)
    assert "start-up is not counted" in quote_accuracy(None, 0)


def test_search_hits_are_marked_and_everything_else_escaped():
    assert highlight("<b>Loss</b> loss", "LOSS") == "&lt;b&gt;<mark>Loss</mark>&lt;/b&gt; <mark>loss</mark>"
    assert highlight("<i>", "") == "&lt;i&gt;"
