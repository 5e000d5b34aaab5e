"""Spot allocations pay the clearing price in force each second, never below the floor in force."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import Price, SpotPrice
from billing.services.meter import charge_allocations
from billing.services.pricing import PriceBook
from fleet.choices import AllocationMode
from fleet.models import Allocation, ChipType, Job
from tests.support.lines import line_charged

pytestmark = pytest.mark.django_db


def test_a_spot_allocation_is_billed_at_the_clearing_price_of_each_second(enroll, alice, fund):
    fund(alice, "100")
    node, _ = enroll("spot-bill", "rtx-4090", chips=2, spot=True)
    chip = ChipType.objects.get(slug="rtx-4090")
    t0 = timezone.now().replace(microsecond=0) - timedelta(seconds=200)
    Price.objects.create(chip_type=chip, on_demand_per_hour=1_200_000, spot_floor_per_hour=500_000, effective_at=t0)
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000
    )
    allocation = Allocation.objects.create(
        job=job, node=node, chip_type=chip, chips=2, mode=AllocationMode.SPOT, epoch=1, started_at=t0, billed_through=t0
    )
    SpotPrice.objects.create(
        chip_type=chip,
        at=t0 + timedelta(seconds=10),
        price_per_hour=800_000,
        floor_per_hour=500_000,
        capacity=2,
        demand=3,
        allocated=2,
    )
    # The operator raises the floor at +40 s; the clearing price then falls below it at +70 s.
    Price.objects.create(
        chip_type=chip,
        on_demand_per_hour=1_200_000,
        spot_floor_per_hour=700_000,
        effective_at=t0 + timedelta(seconds=40),
    )
    SpotPrice.objects.create(
        chip_type=chip,
        at=t0 + timedelta(seconds=70),
        price_per_hour=600_000,
        floor_per_hour=500_000,
        capacity=2,
        demand=2,
        allocated=2,
    )
    charge_allocations([allocation.pk], t0 + timedelta(seconds=45))
    charge_allocations([allocation.pk], t0 + timedelta(seconds=100))
    # 2 chips x (10 s at 0.50 + 60 s at 0.80 + 30 s at max(0.60, floor 0.70)) / 3600 s, rounded once
    assert line_charged(allocation) == round(2 * (10 * 500_000 + 60 * 800_000 + 30 * 700_000) / 3600)
    book = PriceBook.load([chip.pk])
    assert book.price_per_hour(chip.pk, AllocationMode.ON_DEMAND, t0 + timedelta(seconds=80)) == 1_200_000
    assert book.price_per_hour(chip.pk, AllocationMode.SPOT, t0 + timedelta(seconds=5)) == 500_000
