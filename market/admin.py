"""Admin console for the spot market: bids (read-only), the clearing price history, and the notice period."""

from __future__ import annotations

from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from base.admin import AuditedChangesMixin, ReadOnlyMixin
from base.audit import record
from billing.models import Price, SpotPrice
from kernel.money import format_price
from market.models import Bid, BidStatus, MarketSettings
from market.services.bids import BidRefused, cancel_bid

FLOORS_NOTE = (
    "Spot floors are the spot floor of each chip type's price row: add a new price under Billing › Prices "
    "(prices are add-only, so the history is kept). The auction never clears below the floor in force."
)


@admin.register(Bid)
class BidAdmin(admin.ModelAdmin):
    """Bids are the users' own: the operator looks, and may cancel one (which clears the market at once)."""

    list_display = [
        "id",
        "owner",
        "job_link",
        "chip_type",
        "chips",
        "max_price",
        "status",
        "won_chips",
        "clearing",
        "placed_at",
    ]
    list_filter = ["status", "chip_type"]
    search_fields = ["owner__username", "owner__email", "job__id"]
    list_select_related = ["owner", "job", "chip_type"]
    date_hierarchy = "placed_at"
    fields = [
        "owner",
        "job_link",
        "chip_type",
        "chips",
        "max_price",
        "status",
        "won_chips",
        "clearing",
        "placed_at",
        "created_at",
        "updated_at",
    ]
    readonly_fields = fields
    actions = ["cancel_selected"]

    @admin.display(description="Job", ordering="job_id")
    def job_link(self, bid: Bid) -> str:
        return format_html('<a href="{}">Job {}</a>', reverse("admin:fleet_job_change", args=[bid.job_id]), bid.job_id)

    @admin.display(description="Max price /chip-h", ordering="max_price_per_hour")
    def max_price(self, bid: Bid) -> str:
        return format_price(bid.max_price_per_hour)

    @admin.display(description="Clearing price /chip-h", ordering="clearing_price")
    def clearing(self, bid: Bid) -> str:
        return format_price(bid.clearing_price)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Cancel the selected bids (their jobs are moved off spot chips with notice)")
    def cancel_selected(self, request, queryset) -> None:
        cancelled = []
        for bid in queryset.filter(status=BidStatus.ACTIVE).select_related("chip_type"):
            try:
                cancel_bid(bid)
            except BidRefused as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                record(request.user, "bid.cancel", bid, job=bid.job_id, owner=bid.owner, chip_type=bid.chip_type)
                cancelled.append(f"bid {bid.pk} (job {bid.job_id}, {bid.chips}× {bid.chip_type.slug})")
        if not cancelled:
            self.message_user(request, "Nothing was cancelled: only active bids can be cancelled.", messages.INFO)
            return
        self.message_user(
            request,
            f"Cancelled {', '.join(cancelled)}. The market clears again now: a job holding spot chips under a "
            "cancelled bid gets notice to move; chips won but not yet held stop being billed.",
            messages.SUCCESS,
        )


@admin.register(SpotPrice)
class SpotPriceAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """The clearing price history: written by the auction only."""

    list_display = ["chip_type", "at", "price", "floor", "capacity", "demand", "allocated"]
    list_filter = ["chip_type"]
    date_hierarchy = "at"
    list_select_related = ["chip_type"]
    fields = ["chip_type", "at", "price", "floor", "capacity", "demand", "allocated"]
    readonly_fields = fields

    @admin.display(description="Clearing price /chip-h", ordering="price_per_hour")
    def price(self, row: SpotPrice) -> str:
        return format_price(row.price_per_hour)

    @admin.display(description="Floor /chip-h", ordering="floor_per_hour")
    def floor(self, row: SpotPrice) -> str:
        return format_price(row.floor_per_hour)


@admin.register(MarketSettings)
class MarketSettingsAdmin(AuditedChangesMixin, admin.ModelAdmin):
    """One row: the notice a reclaimed spot allocation gets. Floors live on the price rows (shown here)."""

    audit_name = "market_settings"
    list_display = ["__str__", "notice_seconds", "updated_at"]
    fieldsets = [
        (None, {"fields": ["notice_seconds"]}),
        ("Spot floors", {"fields": ["floors"], "description": FLOORS_NOTE}),
    ]
    readonly_fields = ["floors"]

    @admin.display(description="Floors in force")
    def floors(self, obj: MarketSettings | None = None) -> str:
        rows = Price.objects.in_force(timezone.now()).select_related("chip_type")
        rows = sorted(rows, key=lambda price: (price.chip_type.sort_order, price.chip_type.slug))
        if not rows:
            return "No prices yet."
        listing = format_html_join(
            "",
            "<li>{}: {} per chip-hour (since {})</li>",
            ((p.chip_type.name, format_price(p.spot_floor_per_hour), f"{p.effective_at:%Y-%m-%d %H:%M}") for p in rows),
        )
        return format_html(
            '<ul style="margin:0;padding-left:1.1rem">{}</ul><a href="{}">Add a price (changes a floor)</a>',
            listing,
            reverse("admin:billing_price_add"),
        )

    def has_add_permission(self, request) -> bool:
        return not MarketSettings.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        MarketSettings.load()
        return super().changelist_view(request, extra_context)
