"""The 24 h spot chart isn't squeezed by one spike: its price axis stops a little above what held 95% of the
time, and the history says where (market/chart.py; static/js/spot.js marks what lies above)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import SpotPrice
from fleet.models import ChipType
from market.chart import price_ceiling

HOUR = 3600.0
DAY = 24 * HOUR


def test_a_few_minutes_spike_stops_the_axis_above_the_usual_price():
    path = [(0.0, 800_000), (10 * HOUR, 9_000_000), (10 * HOUR + 300, 850_000)]

    assert price_ceiling([path], since=0.0, now=DAY) == round(850_000 * 1.2)


def test_prices_without_a_spike_use_the_whole_axis():
    path = [(0.0, 800_000), (6 * HOUR, 1_000_000), (12 * HOUR, 900_000)]

    assert price_ceiling([path], since=0.0, now=DAY) is None


def test_a_price_that_stayed_high_for_hours_is_no_spike():
    path = [(0.0, 500_000), (12 * HOUR, 3_000_000)]

    assert price_ceiling([path], since=0.0, now=DAY) is None


def test_the_price_in_force_when_the_window_opens_counts_from_the_window_on():
    """A price cleared long before the window weighs only the time it held inside it."""
    path = [(-30 * DAY, 9_000_000), (-1.0, 800_000)]

    assert price_ceiling([path], since=0.0, now=DAY) is None


def test_several_chip_types_share_one_axis():
    cheap = [(0.0, 500_000)]
    dear = [(0.0, 2_000_000), (5 * HOUR, 40_000_000), (5 * HOUR + 60, 2_000_000)]

    assert price_ceiling([cheap, dear], since=0.0, now=DAY) == 2_400_000


@pytest.mark.django_db
def test_the_spot_history_names_the_axis_ceiling_when_a_spike_would_squeeze_the_chart(client, catalog):
    chip = ChipType.objects.get(slug="rtx-4090")
    now = timezone.now()
    for minutes_ago, price in ((600, 600_000), (300, 9_800_000), (299, 650_000)):
        SpotPrice.objects.create(
            chip_type=chip, at=now - timedelta(minutes=minutes_ago), price_per_hour=price, floor_per_hour=500_000,
            capacity=8, demand=2, allocated=2,
        )  # fmt: skip

    body = json.loads(client.get(reverse("spot_history")).content)

    assert body["axis_max"] == "0.78"  # 1.2 × ¥0.65, what held most of the time
    assert [price for _, price in body["series"][0]["points"]] == ["0.60", "9.80", "0.65"]
