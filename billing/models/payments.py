"""Stripe top-ups: raw webhook events as received, payments and refunds."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kernel.money import format_amount


class PaymentStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    REFUNDED = "refunded", "Refunded"
    PARTIALLY_REFUNDED = "partially_refunded", "Partially refunded"


class StripeEvent(models.Model):
    """A webhook event exactly as Stripe sent it, stored before it is processed (once per id)."""

    id = models.CharField(primary_key=True, max_length=255)
    type = models.CharField(max_length=100)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class Payment(models.Model):
    """A top-up through a Stripe PaymentIntent; credited once, on the signed success webhook."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="payments")
    payment_intent_id = models.CharField(max_length=255, unique=True)
    amount = models.BigIntegerField(help_text="micro-units")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=24, choices=PaymentStatus.choices, default=PaymentStatus.PENDING)
    credited = models.OneToOneField(
        "billing.Transaction", null=True, blank=True, on_delete=models.PROTECT, related_name="payment"
    )
    refunded_amount = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{format_amount(self.amount)} {self.currency} ({self.payment_intent_id})"


class Refund(models.Model):
    """An operator's refund of (part of) a payment, limited to the user's unspent balance."""

    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    stripe_refund_id = models.CharField(max_length=255, blank=True)
    amount = models.BigIntegerField(help_text="micro-units")
    reason = models.CharField(max_length=400)
    transaction = models.OneToOneField("billing.Transaction", on_delete=models.PROTECT, related_name="refund")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"refund {format_amount(self.amount)} of {self.payment}"
