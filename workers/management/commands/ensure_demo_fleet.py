"""Prepare the local demo fleet: an enrollment token per pool, remembered in the data folder."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from workers.models import EnrollmentToken, Pool, hash_secret

# hostname, chip type, chips, spot-eligible: three chip types, small enough for a 2-core laptop.
DEMO_FLEET = [
    ("demo-rtx-4090-a", "rtx-4090", 1, False),
    ("demo-rtx-4090-b", "rtx-4090", 1, True),
    ("demo-tpu-v5e", "tpu-v5e", 1, True),
    ("demo-ascend-910b", "ascend-910b", 1, False),
]


class Command(BaseCommand):
    help = "Write <data dir>/demo-fleet.json: the simulated agents `make run` starts, with their tokens."

    def handle(self, *args, **options) -> None:
        path = Path(settings.DATA_DIR) / "demo-fleet.json"
        known = {entry["hostname"]: entry for entry in json.loads(path.read_text())} if path.exists() else {}
        fleet = [
            self._entry(known.get(hostname), hostname, chip, chips, spot) for hostname, chip, chips, spot in DEMO_FLEET
        ]
        path.write_text(json.dumps(fleet, indent=2))
        path.chmod(0o600)
        self.stdout.write(f"Demo fleet: {len(fleet)} simulated agents ({path})")

    def _entry(self, known: dict | None, hostname: str, chip: str, chips: int, spot: bool) -> dict:
        if (
            known
            and EnrollmentToken.objects.filter(token_hash=hash_secret(known["token"]), revoked_at__isnull=True).exists()
        ):
            return known
        pool = Pool.objects.filter(chip_type__slug=chip).order_by("pk").first()
        _, raw = EnrollmentToken.issue(pool, name=f"demo fleet: {hostname}")
        return {"hostname": hostname, "chip": chip, "chips": chips, "spot": spot, "token": raw}
