"""Seed chip types, launch prices, pools and simulated nodes; running it again adds nothing."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from billing.models import Price
from fleet.models import ChipType, Node, Pool
from kernel.catalog import SEED_NODES, ZONE, chip_specs
from kernel.money import to_micros


class Command(BaseCommand):
    help = "Create the chip catalog, launch prices, pools and seeded nodes if they are missing."

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        created = 0
        for spec in chip_specs():
            on_demand, spot_floor = spec.pop("on_demand"), spec.pop("spot_floor")
            chip, new_chip = ChipType.objects.get_or_create(slug=spec["slug"], defaults=spec)
            created += new_chip
            if not chip.prices.exists():
                Price.objects.create(
                    chip_type=chip,
                    on_demand_per_hour=to_micros(on_demand),
                    spot_floor_per_hour=to_micros(spot_floor),
                    note="Launch price",
                )
            pool, _ = Pool.objects.get_or_create(chip_type=chip, zone=ZONE, defaults={"name": f"{chip.slug}-{ZONE}"})
            for index, (chips, spot) in enumerate(SEED_NODES[chip.slug], start=1):
                Node.objects.get_or_create(
                    hostname=f"sim-{chip.slug}-{index:02d}",
                    defaults={"pool": pool, "chips": chips, "spot_eligible": spot, "simulated": True},
                )
        message = f"Catalog: {created} chip type(s) created" if created else "Catalog already seeded"
        self.stdout.write(message)
