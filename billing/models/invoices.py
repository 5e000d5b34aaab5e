"""Receipts of top-ups, a customer's invoice (fapiao) details, and their invoice requests (docs/INVOICES.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from billing.taxpayer import validate_taxpayer_id
from kernel.money import format_amount


class PaymentMethodType(models.TextChoices):
    """How a top-up was paid, as Stripe names the PaymentMethod's type."""

    CARD = "card", _("Card")
    ALIPAY = "alipay", _("Alipay")
    WECHAT_PAY = "wechat_pay", _("WeChat Pay")


class Receipt(models.Model):
    """Written once, in the transaction that credits a top-up: what was paid and the balance right after."""

    payment = models.OneToOneField(
        "billing.Payment", on_delete=models.PROTECT, related_name="receipt", verbose_name=_("payment")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="receipts", verbose_name=_("user")
    )
    amount = models.BigIntegerField(_("amount"), help_text=_("micro-units"))
    currency = models.CharField(_("currency"), max_length=3)
    # Blank when Stripe did not say (an older payment synced from its events).
    method = models.CharField(_("payment method"), max_length=32, choices=PaymentMethodType.choices, blank=True)
    payment_intent_id = models.CharField(_("Stripe payment id"), max_length=255)
    balance_after = models.BigIntegerField(_("balance after"), help_text=_("micro-units"))
    credited_at = models.DateTimeField(_("credited at"))

    class Meta:
        verbose_name = _("receipt")
        verbose_name_plural = _("receipts")
        ordering = ["-credited_at", "-id"]

    def __str__(self) -> str:
        return f"receipt {self.pk}: {format_amount(self.amount)} {self.currency} ({self.payment_intent_id})"


class InvoiceDetails(models.Model):
    """Who an invoice is made out to: one set per customer, copied into each request."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="invoice_details", verbose_name=_("user")
    )
    company_name = models.CharField(_("company name"), max_length=200)
    taxpayer_id = models.CharField(_("taxpayer id"), max_length=18, validators=[validate_taxpayer_id])
    address = models.CharField(_("address"), max_length=300)
    bank = models.CharField(_("bank and account"), max_length=200, blank=True)
    phone = models.CharField(_("phone"), max_length=40, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("invoice details")
        verbose_name_plural = _("invoice details")

    def __str__(self) -> str:
        return f"{self.company_name} ({self.taxpayer_id})"


class InvoiceStatus(models.TextChoices):
    REQUESTED = "requested", _("Requested")
    ISSUED = "issued", _("Issued")


class InvoiceRequest(models.Model):
    """A customer's request for the invoice of one month's statement; the operator marks it issued."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="invoice_requests", verbose_name=_("user")
    )
    month = models.CharField(_("month"), max_length=7, help_text=_("YYYY-MM"))
    amount = models.BigIntegerField(_("amount"), help_text=_("micro-units"))
    # The invoice details as they were when the request was made.
    company_name = models.CharField(_("company name"), max_length=200)
    taxpayer_id = models.CharField(_("taxpayer id"), max_length=18)
    address = models.CharField(_("address"), max_length=300)
    bank = models.CharField(_("bank and account"), max_length=200, blank=True)
    phone = models.CharField(_("phone"), max_length=40, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.REQUESTED
    )
    requested_at = models.DateTimeField(_("requested at"), auto_now_add=True)
    invoice_number = models.CharField(_("invoice number"), max_length=64, blank=True)
    issued_at = models.DateTimeField(_("issued at"), null=True, blank=True)
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("issued by"),
    )

    class Meta:
        verbose_name = _("invoice request")
        verbose_name_plural = _("invoice requests")
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "month"], name="one_invoice_request_per_user_month"),
            models.CheckConstraint(
                condition=Q(status=InvoiceStatus.REQUESTED, invoice_number="", issued_at__isnull=True)
                | (Q(status=InvoiceStatus.ISSUED, issued_at__isnull=False) & ~Q(invoice_number="")),
                name="issued_invoice_has_number_and_time",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="invoice_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.company_name} {self.month} ({self.get_status_display()})"
