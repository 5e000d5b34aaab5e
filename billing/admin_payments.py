"""Admin for card payments, raw Stripe events and refunds; operators refund from a payment's page."""

from __future__ import annotations

import secrets

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import ReadOnlyMixin, zoned
from base.audit import already_recorded, record
from base.templatetags.money import money_html
from billing.models import Payment, Refund, StripeEvent
from billing.services.ledger import balance_of
from billing.services.stripe_payments.config import PaymentError, minor_unit_micros
from billing.services.stripe_payments.refunds import refund_payment, refundable_micros
from kernel.money import format_price, to_micros


class RefundForm(forms.Form):
    amount = forms.CharField(
        label=format_lazy(_("Amount ({symbol})"), symbol=settings.CURRENCY_SYMBOL),
        max_length=32,
        help_text=format_lazy(
            _("In {symbol} (yuan), at most two decimals, e.g. 20.00."), symbol=settings.CURRENCY_SYMBOL
        ),
    )
    reason = forms.CharField(label=_("Reason"), max_length=400, widget=forms.TextInput(attrs={"size": 60}))
    nonce = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def clean_amount(self) -> int:
        try:
            micros = to_micros(self.cleaned_data["amount"].strip())
        except ValueError:
            raise forms.ValidationError(_("Enter the amount as a number, e.g. 20.00.")) from None
        if micros <= 0:
            raise forms.ValidationError(_("A refund amount must be positive."))
        if micros % minor_unit_micros(settings.CURRENCY):
            raise forms.ValidationError(_("Enter the amount with at most two decimals."))
        return micros


class RefundInline(ReadOnlyMixin, admin.TabularInline):
    model = Refund
    fields = ["created_at", "amount_display", "reason", "stripe_refund_id", "created_by", "transaction"]
    readonly_fields = fields
    extra = 0

    @admin.display(description=_("Amount"))
    def amount_display(self, refund: Refund):
        return money_html(refund.amount)


@admin.register(Payment)
class PaymentAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "payment_intent_id",
        "user",
        "amount_display",
        "status",
        "refunded_display",
        zoned(Payment, "created_at"),
    ]
    list_filter = ["status"]
    search_fields = ["payment_intent_id", "user__username", "user__email"]
    fields = [
        "user",
        "payment_intent_id",
        "amount_display",
        "currency",
        "status",
        "credited",
        "refunded_display",
        "refund_link",
        "created_at",
        "updated_at",
    ]
    readonly_fields = fields
    inlines = [RefundInline]
    actions = ["refund_selected"]

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_staff

    @admin.display(description=_("Amount"), ordering="amount")
    def amount_display(self, payment: Payment):
        return money_html(payment.amount)

    @admin.display(description=_("Refunded"), ordering="refunded_amount")
    def refunded_display(self, payment: Payment):
        return money_html(payment.refunded_amount)

    @admin.display(description=_("Refund"))
    def refund_link(self, payment: Payment) -> str:
        url = reverse("admin:billing_payment_refund", args=[payment.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, gettext("Refund…"))

    @admin.action(description=_("Refund the selected payment…"))
    def refund_selected(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, gettext("Select exactly one payment to refund."), messages.ERROR)
            return None
        return HttpResponseRedirect(reverse("admin:billing_payment_refund", args=[queryset.get().pk]))

    def get_urls(self):
        refund = self.admin_site.admin_view(self.refund_view)
        return [path("<int:pk>/refund/", refund, name="billing_payment_refund"), *super().get_urls()]

    def refund_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not request.user.has_perm("billing.add_refund") and not request.user.is_superuser:
            return HttpResponse(gettext("You may not refund payments."), status=403)
        payment = get_object_or_404(Payment.objects.select_related("user"), pk=pk)
        form = RefundForm(request.POST or None, initial={"nonce": secrets.token_urlsafe(18)})
        if request.method == "POST" and form.is_valid():
            try:
                refund = refund_payment(
                    payment,
                    form.cleaned_data["amount"],
                    reason=form.cleaned_data["reason"],
                    actor=request.user,
                    nonce=form.cleaned_data["nonce"],
                )
            except PaymentError as error:
                form.add_error(None, str(error))
            else:
                if not already_recorded("payment.refund", refund=refund.pk):  # a resubmitted form refunds once
                    record(
                        request.user,
                        "payment.refund",
                        payment,
                        refund=refund.pk,
                        amount=format_price(refund.amount),
                        reason=form.cleaned_data["reason"],
                    )
                self.message_user(
                    request,
                    gettext(
                        "Refunded %(amount)s of %(payment)s to %(user)s's card and took it from their balance "
                        "(Stripe refund %(refund)s)."
                    )
                    % {
                        "amount": format_price(refund.amount),
                        "payment": payment.payment_intent_id,
                        "user": payment.user,
                        "refund": refund.stripe_refund_id,
                    },
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:billing_payment_change", args=[payment.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Refund %(payment)s") % {"payment": payment.payment_intent_id},
            "opts": self.model._meta,
            "payment": payment,
            "form": form,
            "amount": money_html(payment.amount),
            "refunded": money_html(payment.refunded_amount),
            # Exact, not rounded: it bounds what the operator may type.
            "refundable": format_price(refundable_micros(payment)),
            "balance": money_html(balance_of(payment.user)),
        }
        return TemplateResponse(request, "portal/billing/admin_refund.html", context)


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "type", zoned(StripeEvent, "received_at"), zoned(StripeEvent, "processed_at"), "error"]
    list_filter = ["type"]
    search_fields = ["id"]


@admin.register(Refund)
class RefundAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "payment",
        "amount_display",
        "reason",
        "stripe_refund_id",
        "created_by",
        zoned(Refund, "created_at"),
    ]
    search_fields = ["payment__payment_intent_id", "stripe_refund_id", "reason"]
    fields = ["payment", "amount_display", "reason", "stripe_refund_id", "transaction", "created_by", "created_at"]
    readonly_fields = fields

    @admin.display(description=_("Amount"), ordering="amount")
    def amount_display(self, refund: Refund):
        return money_html(refund.amount)
