"""`python manage.py run_lighthouses`: keep a torchft Lighthouse for every running job of islands."""

from __future__ import annotations

import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from workers.services.lighthouses import Keeper, islands_enabled, wanted


class Command(BaseCommand):
    help = "Run a torchft Lighthouse for every running job whose plan has islands (docs/ISLANDS.md)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the jobs")
        parser.add_argument("--once", action="store_true", help="look once and stop the lighthouses (tests)")

    def handle(self, *args, interval: float, once: bool, **options) -> None:
        if not islands_enabled():
            raise CommandError(
                f"No torchft Lighthouse program at LIGHTHOUSE_PROGRAM={settings.LIGHTHOUSE_PROGRAM!r}: "
                "install the agent extra (torchft) or set LIGHTHOUSE_PROGRAM."
            )
        keeper = Keeper(settings.LIGHTHOUSE_PROGRAM, settings.DATA_DIR / "lighthouses")
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        try:
            while not stopping:
                close_old_connections()
                keeper.sync(wanted())
                if once:
                    break
                time.sleep(interval)
        except KeyboardInterrupt:
            pass
        finally:
            keeper.close()
