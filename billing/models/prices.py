"""Versioned prices: a new price is a new row; past rows never change."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

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

    chip_type = models.ForeignKey(
        "fleet.ChipType", on_delete=models.PROTECT, related_name="prices", verbose_name=_("chip type")
    )
    on_demand_per_hour = models.BigIntegerField(_("on-demand per chip-hour"), help_text=_("micro-units per chip-hour"))
    spot_floor_per_hour = models.BigIntegerField(
        _("spot floor per chip-hour"), help_text=_("micro-units per chip-hour")
    )
    effective_at = models.DateTimeField(_("effective at"), default=timezone.now, db_index=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("author"),
    )
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = PriceQuerySet.as_manager()

    class Meta:
        verbose_name = _("price")
        verbose_name_plural = _("prices")
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

    chip_type = models.ForeignKey(
        "fleet.ChipType", on_delete=models.PROTECT, related_name="spot_prices", verbose_name=_("chip type")
    )
    at = models.DateTimeField(_("at"))
    price_per_hour = models.BigIntegerField(_("clearing price per chip-hour"), help_text=_("micro-units per chip-hour"))
    floor_per_hour = models.BigIntegerField(_("floor per chip-hour"), help_text=_("micro-units per chip-hour"))
    capacity = models.PositiveIntegerField(_("capacity"))
    demand = models.PositiveIntegerField(_("demand"))
    allocated = models.PositiveIntegerField(_("allocated"))

    class Meta:
        verbose_name = _("spot price")
        verbose_name_plural = _("spot prices")
        db_table = "market_spotprice"  # moved here from the market app; the table kept its name
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["chip_type", "at"], name="market_spot_chip_ty_4387f6_idx")]
        constraints = [models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="spot_price_not_negative")]

    def __str__(self) -> str:
        return f"{self.chip_type.name} at {self.at:%Y-%m-%d %H:%M:%S}: {format_price(self.price_per_hour)}/chip-h"
