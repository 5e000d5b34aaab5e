"""Statuses and kinds of the billing app."""

from django.db import models


class AccountKind(models.TextChoices):
    WALLET = "wallet", "User wallet"
    PROMOTIONS = "promotions", "Promotions (trial credit)"
    ADJUSTMENTS = "adjustments", "Operator adjustments"
    REVENUE = "revenue", "Compute revenue"
    PAYMENT_CLEARING = "payment_clearing", "Payment clearing"
    INSURANCE = "insurance", "Training insurance"


class TransactionKind(models.TextChoices):
    TRIAL_CREDIT = "trial_credit", "Trial credit"
    ADJUSTMENT = "adjustment", "Credit adjustment"
    TOPUP = "topup", "Top-up"
    CHARGE = "charge", "Compute charge"
    REFUND = "refund", "Refund"
    REVERSAL = "reversal", "Reversal"
