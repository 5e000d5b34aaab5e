"""Versioned prices: a new price is a new row; past rows never change."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from kernel.money import format_amount, format_price


class PriceQuerySet(models.QuerySet):
    def in_force(self, now=None) -> PriceQuerySet:
        """The newest effective row per chip type at `now`."""
        now = now or timezone.now()
        return (
            self.filter(effective_at__lte=now).order_by("chip_type_id", "-effective_at", "-id").distinct("chip_type_id")
        )


class Price(models.Model):
    """On-demand price and spot floor per chip-hour for one chip type, from `effective_at` on."""

    chip_type = models.ForeignKey("fleet.ChipType", on_delete=models.PROTECT, related_name="prices")
    on_demand_per_hour = models.BigIntegerField(help_text="micro-units per chip-hour")
    spot_floor_per_hour = models.BigIntegerField(help_text="micro-units per chip-hour")
    effective_at = models.DateTimeField(default=timezone.now, db_index=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PriceQuerySet.as_manager()

    class Meta:
        ordering = ["chip_type", "-effective_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(on_demand_per_hour__gt=0), name="on_demand_price_positive"),
            models.CheckConstraint(condition=Q(spot_floor_per_hour__gt=0), name="spot_floor_positive"),
            models.CheckConstraint(
                condition=Q(spot_floor_per_hour__lte=F("on_demand_per_hour")),
                name="spot_floor_not_above_on_demand",
            ),
        ]

    def __str__(self) -> str:
        # The admin names a row by this in its messages ("The price “…” was added"): the chip and the money.
        return (
            f"{self.chip_type.name}: {format_price(self.on_demand_per_hour)}/chip-h, spot floor "
            f"{format_price(self.spot_floor_per_hour)}, from {self.effective_at:%Y-%m-%d %H:%M}"
        )

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            from billing.models.ledger import AppendOnlyError

            raise AppendOnlyError("Prices are versioned: add a new price instead of editing this one.")
        super().save(*args, **kwargs)

    @property
    def on_demand_display(self) -> str:
        return format_amount(self.on_demand_per_hour)

    @property
    def spot_floor_display(self) -> str:
        return format_amount(self.spot_floor_per_hour)


class SpotPrice(models.Model):
    """One clearing of one chip type's spot auction, kept when its price or its market changed.

    The spot market (market/) clears the auction and records each result here; what a spot chip-hour
    cost at any moment (billing.services.pricing.PriceBook) is read from this history.
    """

    chip_type = models.ForeignKey("fleet.ChipType", on_delete=models.PROTECT, related_name="spot_prices")
    at = models.DateTimeField()
    price_per_hour = models.BigIntegerField(help_text="micro-units per chip-hour")
    floor_per_hour = models.BigIntegerField()
    capacity = models.PositiveIntegerField()
    demand = models.PositiveIntegerField()
    allocated = models.PositiveIntegerField()

    class Meta:
        db_table = "market_spotprice"  # moved here from the market app; the table kept its name
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["chip_type", "at"], name="market_spot_chip_ty_4387f6_idx")]
        constraints = [models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="spot_price_not_negative")]

    def __str__(self) -> str:
        return f"{self.chip_type.name} at {self.at:%Y-%m-%d %H:%M:%S}: {format_price(self.price_per_hour)}/chip-h"
