"""Compare what each allocation was charged with what its time should cost; exit 1 on any difference."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Sum
from django.utils import timezone

from base.money import format_amount
from billing.models import Charge
from billing.services.meter import SECOND, billing_mark, owed
from billing.services.pricing import PriceBook
from workers.models import Allocation


class Command(BaseCommand):
    help = (
        "Per allocation: billed seconds against its [started_at, ended_at or now), the charged total against "
        "its price integrated over the billed seconds, and the Charge rows against both. Exit code 1 on any difference."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--lag", type=int, default=60, help="Seconds an open allocation's billing may trail now (default 60)."
        )

    def handle(self, *args, lag: int, **options):
        now = timezone.now()
        differences = list(self.differences(now, timedelta(seconds=lag)))
        for line in differences:
            self.stdout.write(line)
        checked = Allocation.objects.count()
        if differences:
            raise CommandError(f"{len(differences)} difference(s) in {checked} allocation(s).", returncode=1)
        self.stdout.write(self.style.SUCCESS(f"{checked} allocation(s) reconciled, no differences."))

    def differences(self, now, lag: timedelta):
        book = PriceBook.load()
        rows = {
            row["allocation_id"]: row
            for row in Charge.objects.values("allocation_id").annotate(
                amount=Sum("amount"), seconds=Sum("seconds"), count=Count("id")
            )
        }
        for a in Allocation.objects.order_by("pk").iterator(chunk_size=2000):
            should_through = billing_mark(a.started_at, min(now, a.ended_at) if a.ended_at else now)
            billed = (a.billed_through - a.started_at) // SECOND
            should = (should_through - a.started_at) // SECOND
            if (a.ended_at and billed != should) or billed > should or should - billed > lag // SECOND:
                yield f"allocation {a.pk}: billed {billed}s, ran {should}s"
            due = owed(book, a.chip_type_id, a.mode, a.chips, a.started_at, a.billed_through)
            if a.charged_total != due:
                yield (
                    f"allocation {a.pk}: charged {format_amount(a.charged_total)}, "
                    f"{billed}s should cost {format_amount(due)} (difference {format_amount(a.charged_total - due)})"
                )
            charges = rows.get(a.pk, {"amount": 0, "seconds": 0})
            if charges["amount"] != a.charged_total:
                yield (
                    f"allocation {a.pk}: charge rows sum to {format_amount(charges['amount'])}, "
                    f"charged total is {format_amount(a.charged_total)}"
                )
