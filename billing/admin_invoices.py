"""Admin for receipts, invoice details and invoice requests: the operator marks a request issued with its number.

Marking issued goes through billing.services.invoices.mark_issued, which sets the time and the operator and
writes the audit entry ("invoice.issue") in the same transaction. Money shows in yuan (`money_html`),
times in the operator's zone with its offset (`format_when`).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import ReadOnlyMixin
from base.formatting import format_when
from base.templatetags.money import money_html
from billing.models import InvoiceDetails, InvoiceRequest, InvoiceStatus, Receipt
from billing.services.invoices import InvoiceError, mark_issued

SNAPSHOT = ["user", "month", "amount_display", "company_name", "taxpayer_id", "address", "bank", "phone"]


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["pk", "user", "amount_display", "method", "payment_intent_id", "credited_when"]
    list_filter = ["method"]
    search_fields = ["payment_intent_id", "user__username", "user__email"]
    fields = ["user", "payment", "amount_display", "method", "payment_intent_id", "balance_display", "credited_when"]
    readonly_fields = fields

    @admin.display(description=_("amount"), ordering="amount")
    def amount_display(self, receipt: Receipt):
        return money_html(receipt.amount)

    @admin.display(description=_("balance after"))
    def balance_display(self, receipt: Receipt):
        return money_html(receipt.balance_after)

    @admin.display(description=_("credited at"), ordering="credited_at")
    def credited_when(self, receipt: Receipt):
        return format_when(receipt.credited_at)


@admin.register(InvoiceDetails)
class InvoiceDetailsAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["user", "company_name", "taxpayer_id", "updated_when"]
    search_fields = ["company_name", "taxpayer_id", "user__username", "user__email"]
    fields = ["user", "company_name", "taxpayer_id", "address", "bank", "phone", "updated_when"]
    readonly_fields = fields

    @admin.display(description=_("updated at"), ordering="updated_at")
    def updated_when(self, details: InvoiceDetails):
        return format_when(details.updated_at)


class IssueForm(forms.ModelForm):
    """The one thing an operator enters: the number of the invoice they issued."""

    class Meta:
        model = InvoiceRequest
        fields = ["invoice_number"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields.get("invoice_number")
        if field is None:  # an issued request: its number is read-only
            return
        field.required = True
        field.help_text = _("The number of the invoice (fapiao) issued; saving marks the request issued.")
        field.error_messages["required"] = _("Enter the invoice number to mark the request issued.")


@admin.register(InvoiceRequest)
class InvoiceRequestAdmin(admin.ModelAdmin):
    form = IssueForm
    list_display = [
        "month",
        "user",
        "company_name",
        "taxpayer_id",
        "amount_display",
        "status",
        "invoice_number",
        "requested_when",
    ]
    list_filter = ["status"]
    search_fields = ["company_name", "taxpayer_id", "user__username", "user__email", "invoice_number"]
    ordering = ["status", "-requested_at"]

    def has_add_permission(self, request) -> bool:
        return False  # customers request invoices from their statements

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_fields(self, request, obj=None):
        issued = ["status", "invoice_number", "issued_when", "issued_by"]
        if obj is not None and obj.status == InvoiceStatus.REQUESTED:
            return [*SNAPSHOT, "status", "requested_when", "invoice_number"]
        return [*SNAPSHOT, "requested_when", *issued]

    def get_readonly_fields(self, request, obj=None):
        fields = [*SNAPSHOT, "status", "requested_when", "issued_when", "issued_by"]
        if obj is None or obj.status == InvoiceStatus.ISSUED:
            fields.append("invoice_number")
        return fields

    @admin.display(description=_("amount"), ordering="amount")
    def amount_display(self, invoice: InvoiceRequest):
        return money_html(invoice.amount)

    @admin.display(description=_("requested at"), ordering="requested_at")
    def requested_when(self, invoice: InvoiceRequest):
        return format_when(invoice.requested_at)

    @admin.display(description=_("issued at"), ordering="issued_at")
    def issued_when(self, invoice: InvoiceRequest):
        return format_when(invoice.issued_at)

    def save_model(self, request, obj: InvoiceRequest, form, change) -> None:
        """Marks the request issued (time, operator, audit entry) instead of saving the form's copy."""
        if "invoice_number" not in form.fields:
            return  # already issued: nothing on the form can change
        number = form.cleaned_data.get("invoice_number", "")
        try:
            issued = mark_issued(obj, number, actor=request.user)
        except InvoiceError as error:
            self.message_user(request, str(error), messages.ERROR)
            return
        obj.refresh_from_db()
        self.message_user(
            request,
            gettext("Invoice %(number)s issued for %(company)s, %(month)s.")
            % {"number": issued.invoice_number, "company": issued.company_name, "month": issued.month},
            messages.SUCCESS,
        )
