"""The spot market: bids, the clearing price history, and the market's operator settings."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from kernel.money import format_amount, format_price


class BidStatus(models.TextChoices):
    ACTIVE = "active", _("Active")
    CANCELLED = "cancelled", _("Cancelled")
    CLOSED = "closed", _("Closed")  # its job ended
    LAPSED = "lapsed", _("Lapsed")  # it won chips its job did not take up in time, so it left the auction


class BidQuerySet(models.QuerySet):
    def active(self) -> BidQuerySet:
        return self.filter(status=BidStatus.ACTIVE)

    def with_reservations(self) -> BidQuerySet:
        """Each bid with `reserved_charge` (charged for chips it won that its job didn't hold) and
        `reserved_since` (when the chips kept for it now started being billed; None when none are)."""
        spans = SpotReservation.objects.filter(bid=OuterRef("pk")).order_by()
        charged = spans.values("bid").annotate(total=Sum("amount")).values("total")
        return self.annotate(
            reserved_charge=Coalesce(Subquery(charged), Value(0), output_field=models.BigIntegerField()),
            reserved_since=Subquery(spans.filter(ended_at__isnull=True).values("started_at")[:1]),
        )


class Bid(models.Model):
    """A job's standing offer for spot chips of one type: up to `chips` at up to `max_price_per_hour` each."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="bids", verbose_name=_("owner")
    )
    job = models.ForeignKey("fleet.Job", on_delete=models.PROTECT, related_name="bids", verbose_name=_("job"))
    chip_type = models.ForeignKey(
        "fleet.ChipType", on_delete=models.PROTECT, related_name="bids", verbose_name=_("chip type")
    )
    chips = models.PositiveSmallIntegerField(verbose_name=_("chips"))
    max_price_per_hour = models.BigIntegerField(
        help_text=_("micro-units per chip-hour"), verbose_name=_("max price per hour")
    )
    status = models.CharField(
        max_length=12, choices=BidStatus.choices, default=BidStatus.ACTIVE, db_index=True, verbose_name=_("status")
    )
    # What the last clearing gave this bid, and at what price.
    won_chips = models.PositiveSmallIntegerField(default=0, verbose_name=_("won chips"))
    clearing_price = models.BigIntegerField(null=True, blank=True, verbose_name=_("clearing price"))
    # Since when the bid has won chips its job does not hold yet; past the take-up time it lapses.
    waiting_since = models.DateTimeField(null=True, blank=True, verbose_name=_("waiting since"))
    # Time priority: ties on price go to the earlier bid. Raising or lowering keeps it.
    placed_at = models.DateTimeField(verbose_name=_("placed at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    objects = BidQuerySet.as_manager()

    class Meta:
        verbose_name = _("bid")
        verbose_name_plural = _("bids")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(chips__gte=1), name="bid_has_chips"),
            models.CheckConstraint(condition=Q(max_price_per_hour__gt=0), name="bid_price_positive"),
            models.UniqueConstraint(
                fields=["job", "chip_type"], condition=Q(status="active"), name="one_active_bid_per_job_and_chip"
            ),
        ]

    def __str__(self) -> str:
        return f"bid {self.pk}: {self.chips}× {self.chip_type.name} ≤ {format_price(self.max_price_per_hour)}/chip-h"

    @property
    def max_price_display(self) -> str:
        return format_amount(self.max_price_per_hour)


class MarketSettings(models.Model):
    """The market's knobs; exactly one row (pk=1). Floors are the spot floors of the price history."""

    notice_seconds = models.PositiveIntegerField(
        default=30,
        help_text=_("How long a reclaimed spot allocation keeps its chips to checkpoint and leave."),
        verbose_name=_("notice seconds"),
    )
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = verbose_name_plural = _("market settings")
        constraints = [models.CheckConstraint(condition=Q(pk=1), name="market_settings_singleton")]

    def __str__(self) -> str:
        return str(_("Market settings"))

    @classmethod
    def load(cls) -> MarketSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class SpotReservation(models.Model):
    """Spot chips a bid won that its job doesn't hold yet, over one span; billed like a spot allocation when it ends."""

    bid = models.ForeignKey(Bid, on_delete=models.PROTECT, related_name="reservations")
    job = models.ForeignKey("fleet.Job", on_delete=models.PROTECT, related_name="spot_reservations")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="spot_reservations")
    chip_type = models.ForeignKey("fleet.ChipType", on_delete=models.PROTECT, related_name="+")
    chips = models.PositiveSmallIntegerField(help_text=_("Won chips the job did not hold over the span"))
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # Set when it ends, in the database transaction that ends it: what its whole seconds cost, what the
    # wallet paid (less than owed only when the wallet ran dry), and the ledger transaction that paid.
    owed = models.BigIntegerField(default=0, help_text=_("micro-units"))
    amount = models.BigIntegerField(default=0, help_text=_("micro-units charged"))
    transaction = models.ForeignKey(
        "billing.Transaction", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["bid"], condition=Q(ended_at__isnull=True), name="one_open_reservation_per_bid"
            ),
            models.CheckConstraint(condition=Q(chips__gte=1), name="reservation_has_chips"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="reservation_ends_after_it_starts",
            ),
            models.CheckConstraint(
                condition=Q(amount__gte=0) & Q(amount__lte=models.F("owed")), name="reservation_charged_at_most_owed"
            ),
        ]

    def __str__(self) -> str:
        return f"reservation {self.pk}: {self.chips}× {self.chip_type.name} for bid {self.bid_id}"
