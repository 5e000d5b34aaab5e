"""Compare what each allocation and billing line was charged with what its time should cost; exit 1 if they differ."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing.services.reconciliation import differences as differences_found
from fleet.models import Allocation


class Command(BaseCommand):
    help = (
        "Per allocation: billed seconds against its [started_at, ended_at or now) and the charged total against "
        "its price integrated over the billed seconds; per billing line (job, chip type, mode): the Charge rows "
        "against its allocations' charged totals and billed chip-seconds. Exit code 1 on any difference."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--lag", type=int, default=60, help="Seconds an open allocation's billing may trail now (default 60)."
        )

    def handle(self, *args, lag: int, **options):
        now = timezone.now()
        differences = list(differences_found(now, timedelta(seconds=lag)))
        for line in differences:
            self.stdout.write(line)
        checked = Allocation.objects.count()
        if differences:
            raise CommandError(f"{len(differences)} difference(s) in {checked} allocation(s).", returncode=1)
        self.stdout.write(self.style.SUCCESS(f"{checked} allocation(s) reconciled, no differences."))
