"""Stripe top-ups: raw webhook events as received, payments and refunds."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from kernel.money import format_amount


class PaymentStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    REFUNDED = "refunded", _("Refunded")
    PARTIALLY_REFUNDED = "partially_refunded", _("Partially refunded")


class StripeEvent(models.Model):
    """A webhook event exactly as Stripe sent it, stored before it is processed (once per id)."""

    id = models.CharField(_("Stripe event id"), primary_key=True, max_length=255)
    type = models.CharField(_("type"), max_length=100)
    payload = models.JSONField(_("payload"))
    received_at = models.DateTimeField(_("received at"), auto_now_add=True)
    processed_at = models.DateTimeField(_("processed at"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        verbose_name = _("Stripe event")
        verbose_name_plural = _("Stripe events")
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class Payment(models.Model):
    """A top-up through a Stripe PaymentIntent; credited once, on the signed success webhook."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="payments", verbose_name=_("user")
    )
    payment_intent_id = models.CharField(_("Stripe payment id"), max_length=255, unique=True)
    amount = models.BigIntegerField(_("amount"), help_text=_("micro-units"))
    currency = models.CharField(_("currency"), max_length=3)
    status = models.CharField(_("status"), max_length=24, choices=PaymentStatus.choices, default=PaymentStatus.PENDING)
    credited = models.OneToOneField(
        "billing.Transaction",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="payment",
        verbose_name=_("credit transaction"),
    )
    refunded_amount = models.BigIntegerField(_("refunded"), default=0, help_text=_("micro-units"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("payment")
        verbose_name_plural = _("payments")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{format_amount(self.amount)} {self.currency} ({self.payment_intent_id})"


class Refund(models.Model):
    """An operator's refund of (part of) a payment, limited to the user's unspent balance."""

    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds", verbose_name=_("payment"))
    stripe_refund_id = models.CharField(_("Stripe refund id"), max_length=255, blank=True)
    amount = models.BigIntegerField(_("amount"), help_text=_("micro-units"))
    reason = models.CharField(_("reason"), max_length=400)
    transaction = models.OneToOneField(
        "billing.Transaction", on_delete=models.PROTECT, related_name="refund", verbose_name=_("ledger transaction")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+", verbose_name=_("created by")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("refund")
        verbose_name_plural = _("refunds")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"refund {format_amount(self.amount)} of {self.payment}"
