"""Credit payments whose webhook never arrived, from Stripe's Events API (once each)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.services.stripe_payments.config import PaymentError
from billing.services.stripe_payments.webhooks import reconcile_payments


class Command(BaseCommand):
    help = "Pull recent payment_intent.succeeded events from Stripe and process any not yet processed."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--hours", type=int, default=72, help="How far back to look (default 72).")

    def handle(self, *args, hours: int, **options) -> None:
        if hours <= 0:
            raise CommandError("--hours must be positive.")
        try:
            processed = reconcile_payments(since_s=hours * 3600)
        except PaymentError as error:
            raise CommandError(str(error)) from error
        for event_id in processed:
            self.stdout.write(f"processed {event_id}")
        self.stdout.write(self.style.SUCCESS(f"{len(processed)} missed event(s) processed."))
