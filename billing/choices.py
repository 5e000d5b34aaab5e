"""Statuses and kinds of the billing app."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class AccountKind(models.TextChoices):
    WALLET = "wallet", _("User wallet")
    PROMOTIONS = "promotions", _("Promotions (trial credit)")
    ADJUSTMENTS = "adjustments", _("Operator adjustments")
    REVENUE = "revenue", _("Compute revenue")
    PAYMENT_CLEARING = "payment_clearing", _("Payment clearing")
    INSURANCE = "insurance", _("Training insurance")


class TransactionKind(models.TextChoices):
    TRIAL_CREDIT = "trial_credit", _("Trial credit")
    ADJUSTMENT = "adjustment", _("Credit adjustment")
    TOPUP = "topup", _("Top-up")
    CHARGE = "charge", _("Compute charge")
    REFUND = "refund", _("Refund")
    REVERSAL = "reversal", _("Reversal")
