"""The double-entry credits ledger: accounts, transactions and their append-only entries."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import translation
from django.utils.translation import gettext_lazy as _

from billing.choices import AccountKind, TransactionKind
from kernel.money import format_amount


class AppendOnlyError(RuntimeError):
    """Ledger rows are never changed or deleted; post a reversing transaction instead."""


class Account(models.Model):
    """A ledger account: one wallet per user, or one platform account per kind."""

    kind = models.CharField(_("kind"), max_length=32, choices=AccountKind.choices)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="accounts",
        verbose_name=_("owner"),
    )
    currency = models.CharField(_("currency"), max_length=3, default="CNY")
    # Running total kept by a database trigger on entry insert; checked against the sum by audit.
    balance = models.BigIntegerField(_("balance"), default=0, editable=False, help_text=_("micro-units"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("account")
        verbose_name_plural = _("accounts")
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "kind", "currency"],
                condition=Q(owner__isnull=False),
                name="one_wallet_per_user",
            ),
            models.UniqueConstraint(
                fields=["kind", "currency"],
                condition=Q(owner__isnull=True),
                name="one_platform_account_per_kind",
            ),
            models.CheckConstraint(
                condition=~Q(kind=AccountKind.WALLET) | Q(balance__gte=0), name="wallet_never_negative"
            ),
            models.CheckConstraint(
                condition=Q(kind=AccountKind.WALLET, owner__isnull=False)
                | (~Q(kind=AccountKind.WALLET) & Q(owner__isnull=True)),
                name="wallets_have_owners_platform_accounts_do_not",
            ),
        ]

    def __str__(self) -> str:
        # In English whatever the reader's language: the audit log stores it (`target_repr`).
        who = self.owner.get_username() if self.owner_id else "platform"
        with translation.override("en"):
            return f"{who} · {self.get_kind_display()}"

    @property
    def balance_display(self) -> str:
        return format_amount(self.balance)


class Transaction(models.Model):
    """One balanced movement of money; its idempotency key makes a retry a no-op."""

    idempotency_key = models.CharField(_("idempotency key"), max_length=200, unique=True)
    # Hash of what was asked for, so the same key with a different request is refused.
    fingerprint = models.CharField(_("fingerprint"), max_length=64)
    kind = models.CharField(_("kind"), max_length=32, choices=TransactionKind.choices)
    memo = models.CharField(_("memo"), max_length=500, blank=True)
    # The memo's msgid and values (base.stored_text): the wallet's page shows it in the reader's language.
    memo_text = models.JSONField(_("memo text"), default=dict, db_default={}, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("created by"),
    )
    reverses = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="reversed_by",
        verbose_name=_("reverses"),
    )
    created_at = models.DateTimeField(_("created at"), db_index=True)

    class Meta:
        verbose_name = _("ledger transaction")
        verbose_name_plural = _("ledger transactions")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        # In English whatever the reader's language, like its memo: the audit log stores it (`target_repr`).
        with translation.override("en"):
            return f"#{self.pk} {self.get_kind_display()}: {self.memo}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise AppendOnlyError("Ledger transactions are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Ledger transactions are append-only; post a reversal instead.")


class EntryQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("Ledger entries are append-only.")

    def delete(self):
        raise AppendOnlyError("Ledger entries are append-only; post a reversal instead.")


class Entry(models.Model):
    """One leg of a transaction: a signed amount in micro-units on one account."""

    transaction = models.ForeignKey(
        Transaction, on_delete=models.PROTECT, related_name="entries", verbose_name=_("ledger transaction")
    )
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="entries", verbose_name=_("account"))
    amount = models.BigIntegerField(_("amount"), help_text=_("micro-units"))
    created_at = models.DateTimeField(_("created at"), db_index=True)

    objects = EntryQuerySet.as_manager()

    class Meta:
        verbose_name = _("entry")
        verbose_name_plural = _("entries")
        ordering = ["-created_at", "-id"]
        constraints = [models.CheckConstraint(condition=~Q(amount=0), name="entry_amount_not_zero")]
        indexes = [models.Index(fields=["account", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.account}: {format_amount(self.amount)}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("Ledger entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Ledger entries are append-only; post a reversal instead.")

    @property
    def amount_display(self) -> str:
        return format_amount(self.amount)
