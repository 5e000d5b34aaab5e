"""Admin console: prices with history, the ledger (read-only), operator settings; changes are audited."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone

from base.admin import AuditedChangesMixin, ReadOnlyMixin
from base.audit import already_recorded, record
from base.money import format_amount
from billing import admin_payments, admin_reports  # noqa: F401  (operator reports: /admin/billing-reports/*, a box on the index)
from billing.forms import OperatorSettingsForm, PriceForm
from billing.models import Account, Entry, OperatorSettings, Price, Transaction
from billing.services.ledger import LedgerError, reverse_transaction


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Ledger rows are append-only: the admin may look, never change or delete."""


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    """Prices are versioned: the operator adds a new row; past rows are shown, never edited."""

    form = PriceForm
    list_display = ["chip_type", "on_demand", "spot_floor", "effective_at", "author", "note"]
    list_filter = ["chip_type"]
    ordering = ["chip_type__sort_order", "-effective_at", "-id"]
    date_hierarchy = "effective_at"

    @admin.display(description="On-demand /chip-h")
    def on_demand(self, price: Price) -> str:
        return format_amount(price.on_demand_per_hour)

    @admin.display(description="Spot floor /chip-h")
    def spot_floor(self, price: Price) -> str:
        return format_amount(price.spot_floor_per_hour)

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_changeform_initial_data(self, request) -> dict:
        return {"effective_at": timezone.now(), **super().get_changeform_initial_data(request)}

    def save_model(self, request, obj: Price, form, change) -> None:
        obj.author = request.user
        previous = obj.chip_type.prices.order_by("-effective_at", "-id").first()
        super().save_model(request, obj, form, change)
        record(
            request.user,
            "price.add",
            obj,
            chip_type=obj.chip_type.slug,
            effective_at=obj.effective_at,
            note=obj.note,
            before=price_values(previous),
            after=price_values(obj),
        )


def price_values(price: Price | None) -> dict[str, str] | None:
    """A price row's money, as the admin shows it."""
    if price is None:
        return None
    return {
        "on_demand": format_amount(price.on_demand_per_hour),
        "spot_floor": format_amount(price.spot_floor_per_hour),
    }


class EntryInline(admin.TabularInline):
    model = Entry
    fields = ["account", "amount_display", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "kind", "memo", "created_by", "idempotency_key"]
    list_filter = ["kind"]
    search_fields = ["memo", "idempotency_key", "entries__account__owner__username"]
    inlines = [EntryInline]
    actions = ["reverse_selected"]

    @admin.action(description="Reverse the selected transactions (a correction)")
    def reverse_selected(self, request, queryset) -> None:
        for txn in queryset:
            try:
                reversal = reverse_transaction(
                    txn, reason=f"reversed by {request.user} in the admin", actor=request.user
                )
            except LedgerError as error:
                self.message_user(request, f"#{txn.pk}: {error}", messages.ERROR)
            else:
                # A transaction is reversed once, however often asked: one entry.
                if not already_recorded("transaction.reverse", reversal=reversal.pk):
                    record(request.user, "transaction.reverse", txn, reversal=reversal.pk, kind=txn.kind, memo=txn.memo)
                self.message_user(request, f"#{txn.pk} reversed by #{reversal.pk}.", messages.SUCCESS)


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["id", "owner", "kind", "currency", "balance_amount"]
    list_filter = ["kind", "currency"]
    search_fields = ["owner__username", "owner__email"]

    @admin.display(description="Balance", ordering="balance")
    def balance_amount(self, account: Account) -> str:
        return format_amount(account.balance)


@admin.register(OperatorSettings)
class OperatorSettingsAdmin(AuditedChangesMixin, admin.ModelAdmin):
    form = OperatorSettingsForm
    audit_name = "operator_settings"
    list_display = ["__str__", "trial_credit_display", "updated_at"]

    def has_add_permission(self, request) -> bool:
        return not OperatorSettings.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        OperatorSettings.load()
        return super().changelist_view(request, extra_context)
