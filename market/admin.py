"""Admin console for the spot market: bids (read-only), the clearing price history, and the notice period."""

from __future__ import annotations

from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy

from base.admin import AuditedChangesMixin, ReadOnlyMixin
from base.audit import record
from base.formatting import format_when as when
from billing.models import Price, SpotPrice
from kernel.money import format_price
from market.models import Bid, BidStatus, MarketSettings
from market.services.bids import BidRefused, cancel_bid

FLOORS_NOTE = gettext_lazy(
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

    @admin.display(description=gettext_lazy("Job"), ordering="job_id")
    def job_link(self, bid: Bid) -> str:
        url = reverse("admin:fleet_job_change", args=[bid.job_id])
        return format_html('<a href="{}">{}</a>', url, gettext("Job %(id)s") % {"id": bid.job_id})

    @admin.display(description=gettext_lazy("Max price /chip-h"), ordering="max_price_per_hour")
    def max_price(self, bid: Bid) -> str:
        return format_price(bid.max_price_per_hour)

    @admin.display(description=gettext_lazy("Clearing price /chip-h"), ordering="clearing_price")
    def clearing(self, bid: Bid) -> str:
        return format_price(bid.clearing_price)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(
        description=gettext_lazy("Cancel the selected bids (their jobs are moved off spot chips with notice)")
    )
    def cancel_selected(self, request, queryset) -> None:
        cancelled = []
        for bid in queryset.filter(status=BidStatus.ACTIVE).select_related("chip_type"):
            try:
                cancel_bid(bid)
            except BidRefused as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                record(request.user, "bid.cancel", bid, job=bid.job_id, owner=bid.owner, chip_type=bid.chip_type)
                cancelled.append(
                    gettext("bid %(bid)s (job %(job)s, %(chips)s× %(chip)s)")
                    % {"bid": bid.pk, "job": bid.job_id, "chips": bid.chips, "chip": bid.chip_type.slug}
                )
        if not cancelled:
            nothing = gettext("Nothing was cancelled: only active bids can be cancelled.")
            self.message_user(request, nothing, messages.INFO)
            return
        self.message_user(
            request,
            gettext(
                "Cancelled %(bids)s. The market clears again now: a job holding spot chips under a cancelled bid "
                "gets notice to move; chips won but not yet held stop being billed."
            )
            % {"bids": ", ".join(cancelled)},
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

    @admin.display(description=gettext_lazy("Clearing price /chip-h"), ordering="price_per_hour")
    def price(self, row: SpotPrice) -> str:
        return format_price(row.price_per_hour)

    @admin.display(description=gettext_lazy("Floor /chip-h"), ordering="floor_per_hour")
    def floor(self, row: SpotPrice) -> str:
        return format_price(row.floor_per_hour)


@admin.register(MarketSettings)
class MarketSettingsAdmin(AuditedChangesMixin, admin.ModelAdmin):
    """One row: the notice a reclaimed spot allocation gets. Floors live on the price rows (shown here)."""

    audit_name = "market_settings"
    list_display = ["__str__", "notice_seconds", "updated_at"]
    fieldsets = [
        (None, {"fields": ["notice_seconds"]}),
        (gettext_lazy("Spot floors"), {"fields": ["floors"], "description": FLOORS_NOTE}),
    ]
    readonly_fields = ["floors"]

    @admin.display(description=gettext_lazy("Floors in force"))
    def floors(self, obj: MarketSettings | None = None) -> str:
        rows = Price.objects.in_force(timezone.now()).select_related("chip_type")
        rows = sorted(rows, key=lambda price: (price.chip_type.sort_order, price.chip_type.slug))
        if not rows:
            return gettext("No prices yet.")
        row = gettext("%(chip)s: %(price)s per chip-hour (since %(since)s)")
        row %= {"chip": "{chip}", "price": "{price}", "since": "{since}"}
        listing = format_html_join(
            "",
            "<li>{}</li>",
            (
                (
                    format_html(
                        row,
                        chip=p.chip_type.name,
                        price=format_price(p.spot_floor_per_hour),
                        since=when(p.effective_at),
                    ),
                )
                for p in rows
            ),
        )
        return format_html(
            '<ul style="margin:0;padding-left:1.1rem">{}</ul><a href="{}">{}</a>',
            listing,
            reverse("admin:billing_price_add"),
            gettext("Add a price (changes a floor)"),
        )

    def has_add_permission(self, request) -> bool:
        return not MarketSettings.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        MarketSettings.load()
        return super().changelist_view(request, extra_context)
