"""Receipts of top-ups, the customer's invoice details, and invoice requests from a month's statement.

A receipt is its owner's only (anyone else gets a 404, as for a receipt that does not exist). The
invoice details form normalises and checks the taxpayer id (billing.taxpayer); a request copies them
(billing.services.invoices). See docs/INVOICES.md.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from billing.models import InvoiceDetails, Receipt
from billing.services.invoices import InvoiceError, request_invoice
from billing.services.receipts import method_label
from billing.taxpayer import normalize_taxpayer_id, validate_taxpayer_id


class InvoiceDetailsForm(forms.ModelForm):
    class Meta:
        model = InvoiceDetails
        fields = ["company_name", "taxpayer_id", "address", "bank", "phone"]
        labels = {
            "company_name": gettext_lazy("Company name"),
            "taxpayer_id": gettext_lazy("Taxpayer id (unified social credit code)"),
            "address": gettext_lazy("Registered address"),
            "bank": gettext_lazy("Bank and account number"),
            "phone": gettext_lazy("Phone"),
        }
        help_texts = {
            "taxpayer_id": gettext_lazy("18 characters, as on the business licence, e.g. 91350100M000100Y43."),
            "bank": gettext_lazy("Optional."),
            "phone": gettext_lazy("Optional."),
        }
        widgets = {"taxpayer_id": forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Spaces pasted inside the code are dropped before its 18 characters are counted, and a wrong
        # length is refused by the taxpayer id check, with a message that names the field.
        field = self.fields["taxpayer_id"]
        field.max_length = None
        field.validators = []
        field.widget.attrs["maxlength"] = 40

    def clean_taxpayer_id(self) -> str:
        code = normalize_taxpayer_id(self.cleaned_data.get("taxpayer_id"))
        validate_taxpayer_id(code)
        return code


def safe_next(request: HttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return ""


@never_cache
@login_required
def receipt(request: HttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(Receipt.objects.select_related("payment"), pk=pk, user=request.user)
    return render(request, "portal/invoices/receipt.html", {"receipt": row, "method": method_label(row)})


@login_required
@require_http_methods(["GET", "POST"])
def invoice_details(request: HttpRequest) -> HttpResponse:
    current = InvoiceDetails.objects.filter(user=request.user).first()
    form = InvoiceDetailsForm(request.POST or None, instance=current or InvoiceDetails(user=request.user))
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Invoice details saved."))
        return redirect(safe_next(request) or reverse("invoice_details"))
    status = 400 if request.method == "POST" else 200
    return render(request, "portal/invoices/details.html", {"form": form, "next": safe_next(request)}, status=status)


@login_required
@require_POST
def invoice_request(request: HttpRequest, month: str) -> HttpResponse:
    try:
        made = request_invoice(request.user, month)
    except InvoiceError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, _("Invoice requested for %(month)s.") % {"month": made.month})
    return redirect("billing_statement", month=month)
