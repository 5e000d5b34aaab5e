"""Admin console: prices with history, the ledger (read-only), operator settings; changes are audited.

Money shows as ¥ amounts: prices per chip-hour with every significant decimal (`format_price`), balances
and ledger amounts to the cent with the exact amount on hover (`money_html`).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import BooleanField, Case, Q, Sum, Value, When
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import AuditedChangesMixin, ReadOnlyMixin, zoned
from base.audit import already_recorded, record
from base.templatetags.money import money_html, signed_money_html
from billing import admin_invoices, admin_payments, admin_reports  # noqa: F401  (operator reports: /admin/billing-reports/*, a box on the index)
from billing.forms import OperatorSettingsForm, PriceForm
from billing.models import Account, Entry, OperatorSettings, Price, Transaction
from billing.services.ledger import LedgerError, reverse_transaction
from kernel.money import format_amount, format_price


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Ledger rows are append-only: the admin may look, never change or delete."""


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    """Prices are versioned: the operator adds a new row; past rows are shown, never edited."""

    form = PriceForm
    list_display = [
        "chip_type",
        "on_demand",
        "spot_floor",
        zoned(Price, "effective_at"),
        "in_force",
        "author",
        "note",
    ]
    list_filter = ["chip_type"]
    ordering = ["chip_type__sort_order", "-effective_at", "-id"]
    date_hierarchy = "effective_at"

    def get_queryset(self, request):
        """Each row knows whether it is the price in force now, by the rule billing charges with
        (`Price.objects.in_force`: the newest row per chip type whose time has come)."""
        in_force_now = Price.objects.in_force(timezone.now()).values("pk")
        return (
            super()
            .get_queryset(request)
            .annotate(
                is_in_force=Case(
                    When(pk__in=in_force_now, then=Value(True)), default=Value(False), output_field=BooleanField()
                )
            )
        )

    @admin.display(description=_("On-demand /chip-h"), ordering="on_demand_per_hour")
    def on_demand(self, price: Price) -> str:
        return format_price(price.on_demand_per_hour)

    @admin.display(description=_("Spot floor /chip-h"), ordering="spot_floor_per_hour")
    def spot_floor(self, price: Price) -> str:
        return format_price(price.spot_floor_per_hour)

    @admin.display(description=_("In force"))
    def in_force(self, price: Price) -> str:
        """ "✓" on the row billing charges with now; blank on past rows and on rows not yet effective."""
        return "✓" if getattr(price, "is_in_force", False) else ""

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
    fields = ["account", "amount_money", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=_("Amount"))
    def amount_money(self, entry: Entry):
        return signed_money_html(entry.amount)


class OwnerFilter(admin.SimpleListFilter):
    """?owner=<user id>: one user's ledger, the transactions that touch any of their accounts (the user
    page links here). Only the chosen user is listed: a list of every user would not fit the sidebar."""

    title = _("user")
    parameter_name = "owner"

    def lookups(self, request, model_admin):
        user = get_user_model().objects.filter(pk=owner_id(request)).first()
        return [(str(user.pk), user.get_username())] if user else []

    def queryset(self, request, queryset):
        owner = owner_id(request)
        if owner is None:
            return queryset
        # A subquery, not a join: a join to entries would repeat each transaction and inflate the amounts.
        return queryset.filter(pk__in=Entry.objects.filter(account__owner_id=owner).values("transaction_id"))


def owner_id(request) -> int | None:
    value = request.GET.get(OwnerFilter.parameter_name, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdmin):
    list_display = ["id", zoned(Transaction, "created_at"), "kind", "amount", "memo", "created_by", "idempotency_key"]
    list_filter = [OwnerFilter, "kind"]
    search_fields = ["memo", "idempotency_key", "entries__account__owner__username"]
    inlines = [EntryInline]
    actions = ["reverse_selected"]

    def get_queryset(self, request):
        """Each transaction's amount (what it moved: the sum of its credits) and, on one user's ledger, what
        it did to that user's accounts, summed in the query (no query per row)."""
        owner = owner_id(request)
        sums = {"moved": Sum("entries__amount", filter=Q(entries__amount__gt=0))}
        if owner is not None:
            sums["for_owner"] = Sum("entries__amount", filter=Q(entries__account__owner_id=owner))
        return super().get_queryset(request).annotate(**sums)

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return [*shown[:4], "for_owner_amount", *shown[4:]] if owner_id(request) is not None else shown

    @admin.display(description=_("Amount"), ordering="moved")
    def amount(self, txn: Transaction):
        return money_html(getattr(txn, "moved", None))

    @admin.display(description=_("For this user"), ordering="for_owner")
    def for_owner_amount(self, txn: Transaction):
        return signed_money_html(getattr(txn, "for_owner", None))

    @admin.action(description=_("Reverse the selected transactions (a correction)"))
    def reverse_selected(self, request, queryset) -> None:
        for txn in queryset:
            try:
                reversal = reverse_transaction(
                    txn, reason=f"reversed by {request.user} in the admin", actor=request.user
                )
            except LedgerError as error:
                self.message_user(
                    request,
                    gettext("Transaction #%(id)s was not reversed: %(error)s") % {"id": txn.pk, "error": error},
                    messages.ERROR,
                )
            else:
                # A transaction is reversed once, however often asked: one entry.
                if not already_recorded("transaction.reverse", reversal=reversal.pk):
                    record(request.user, "transaction.reverse", txn, reversal=reversal.pk, kind=txn.kind, memo=txn.memo)
                self.message_user(
                    request,
                    gettext(
                        "Reversed transaction #%(id)s (%(kind)s): reversal #%(reversal)s puts every account back "
                        "where it was before it."
                    )
                    % {"id": txn.pk, "kind": str(txn.get_kind_display()).lower(), "reversal": reversal.pk},
                    messages.SUCCESS,
                )


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["id", "owner", "kind", "currency", "balance_amount"]
    list_filter = ["kind", "currency"]
    search_fields = ["owner__username", "owner__email"]
    fields = ["owner", "kind", "currency", "balance_amount", "created_at"]
    readonly_fields = fields

    @admin.display(description=_("Balance"), ordering="balance")
    def balance_amount(self, account: Account):
        return money_html(account.balance)


@admin.register(OperatorSettings)
class OperatorSettingsAdmin(AuditedChangesMixin, admin.ModelAdmin):
    form = OperatorSettingsForm
    audit_name = "operator_settings"
    list_display = ["__str__", "trial_credit_money", "topup_limits", zoned(OperatorSettings, "updated_at")]

    @admin.display(description=_("Trial credit"))
    def trial_credit_money(self, obj: OperatorSettings):
        return money_html(obj.trial_credit)

    @admin.display(description=_("Top-up limits"))
    def topup_limits(self, obj: OperatorSettings) -> str:
        return gettext("%(minimum)s to %(maximum)s") % {
            "minimum": format_price(obj.topup_minimum),
            "maximum": format_price(obj.topup_maximum),
        }

    def has_add_permission(self, request) -> bool:
        return not OperatorSettings.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        OperatorSettings.load()
        return super().changelist_view(request, extra_context)
