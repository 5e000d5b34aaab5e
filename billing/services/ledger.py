"""The ledger's service API: post a balanced transaction, reverse one, read a balance.

Every capability that moves money goes through `post_transaction`. The database has the last
word: triggers keep balances, refuse unbalanced transactions and refuse edits, and a check
constraint keeps wallets at or above zero (see migration 0002).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from base.prepared import PreparedQuery
from base.stored_text import StoredText, data_of, english
from billing.choices import AccountKind, TransactionKind
from billing.models import Account, Entry, Transaction
from kernel.money import format_money, format_money_needed


class LedgerError(Exception):
    """A transaction that cannot be posted; the message is safe to show to the user."""


class InsufficientFunds(LedgerError):
    """Posting would take a wallet below zero."""


class IdempotencyConflict(LedgerError):
    """The idempotency key was already used for a different transaction."""


class UnbalancedTransaction(LedgerError):
    """The legs of a transaction do not sum to zero."""


@dataclass(frozen=True)
class Leg:
    account: Account
    amount: int


def wallets_of(owner: int, currency: str):
    """The owner's wallet in `currency` (at most one), as a queryset."""
    return Account.objects.filter(owner=owner, kind=AccountKind.WALLET, currency=currency).order_by("pk")


WALLET = PreparedQuery(wallets_of, owner=int, currency=str)  # read on every account page: compiled once


def wallet_for(user, currency: str | None = None) -> Account:
    """The user's wallet, created on first use."""
    currency = currency or settings.CURRENCY
    account = wallets_of(user.pk, currency).first()
    if account:
        return account
    try:
        with transaction.atomic():
            return Account.objects.create(owner=user, kind=AccountKind.WALLET, currency=currency)
    except IntegrityError:  # created concurrently
        return Account.objects.get(owner=user, kind=AccountKind.WALLET, currency=currency)


def platform_account(kind: str, currency: str | None = None) -> Account:
    """A platform account (revenue, promotions, ...), created on first use."""
    currency = currency or settings.CURRENCY
    account = Account.objects.filter(owner=None, kind=kind, currency=currency).first()
    if account:
        return account
    try:
        with transaction.atomic():
            return Account.objects.create(owner=None, kind=kind, currency=currency)
    except IntegrityError:
        return Account.objects.get(owner=None, kind=kind, currency=currency)


def lock_wallets(owner_ids: set[int], platform: Account) -> dict[int, Account]:
    """The owners' wallets (those that exist) and one platform account, row-locked in id order, the
    ledger's one lock order: {owner id: wallet}."""
    accounts = Account.objects.select_for_update().filter(
        Q(owner_id__in=owner_ids, kind=AccountKind.WALLET, currency=settings.CURRENCY) | Q(pk=platform.pk)
    )
    return {account.owner_id: account for account in accounts.order_by("pk") if account.owner_id}


def balance_of(user) -> int:
    """The user's wallet balance in micro-units (0 before the wallet exists)."""
    accounts = WALLET.rows(limit=1, owner=user.pk, currency=settings.CURRENCY)
    return accounts[0].balance if accounts else 0


def fingerprint_of(kind: str, legs: Sequence[Leg]) -> str:
    canonical = ";".join(f"{leg.account.pk}:{leg.amount}" for leg in sorted(legs, key=lambda leg: leg.account.pk))
    return hashlib.sha256(f"{kind}|{canonical}".encode()).hexdigest()


def post_transaction(
    *,
    key: str,
    kind: str,
    legs: Sequence[Leg],
    memo: str | StoredText = "",
    actor=None,
    reverses: Transaction | None = None,
    now=None,
) -> Transaction:
    """Post `legs` as one transaction, once per `key`.

    A second call with the same key and the same legs returns the first transaction; with other
    legs it raises IdempotencyConflict. Raises InsufficientFunds when a wallet would go negative.
    """
    _check_legs(legs)
    fingerprint = fingerprint_of(kind, legs)
    now = now or timezone.now()
    with transaction.atomic():
        existing = Transaction.objects.filter(idempotency_key=key).first()
        if existing:
            return _replayed(existing, fingerprint)
        try:
            with transaction.atomic():
                txn = Transaction.objects.create(
                    idempotency_key=key,
                    fingerprint=fingerprint,
                    kind=kind,
                    memo=english(memo)[:500],
                    memo_text=data_of(memo),
                    created_by=actor,
                    reverses=reverses,
                    created_at=now,
                )
        except IntegrityError:
            # A concurrent call with the same key committed first; answer with its result.
            return _replayed(Transaction.objects.get(idempotency_key=key), fingerprint)
        _lock_and_check_funds(legs)
        Entry.objects.bulk_create(
            [Entry(transaction=txn, account=leg.account, amount=leg.amount, created_at=now) for leg in legs]
        )
    return txn


def reverse_transaction(original: Transaction, *, reason: str, actor=None, now=None) -> Transaction:
    """Post the mirror image of `original` (a correction); a transaction is reversed at most once."""
    if not reason.strip():
        raise LedgerError("A reversal needs a reason.")
    if original.kind == TransactionKind.REVERSAL:
        raise LedgerError(_("A reversal cannot itself be reversed; post a new transaction instead."))
    legs = [Leg(entry.account, -entry.amount) for entry in original.entries.select_related("account")]
    return post_transaction(
        key=f"reversal:{original.pk}",
        kind=TransactionKind.REVERSAL,
        legs=legs,
        memo=StoredText(gettext_noop("Reversal of #%(id)s: %(reason)s"), id=original.pk, reason=reason.strip()),
        actor=actor,
        reverses=original,
        now=now,
    )


def transfer(*, key: str, kind: str, source: Account, destination: Account, amount: int, **kwargs) -> Transaction:
    """Move `amount` micro-units from one account to another."""
    if amount <= 0:
        raise LedgerError("A transfer amount must be positive.")
    return post_transaction(key=key, kind=kind, legs=[Leg(source, -amount), Leg(destination, amount)], **kwargs)


def _check_legs(legs: Sequence[Leg]) -> None:
    if len(legs) < 2:
        raise UnbalancedTransaction("A transaction needs at least two entries.")
    if any(leg.amount == 0 for leg in legs):
        raise UnbalancedTransaction("An entry cannot be zero.")
    if sum(leg.amount for leg in legs) != 0:
        raise UnbalancedTransaction("The entries of a transaction must sum to zero.")
    if len({leg.account.currency for leg in legs}) != 1:
        raise UnbalancedTransaction("A transaction moves one currency only.")


def _lock_and_check_funds(legs: Sequence[Leg]) -> None:
    deltas: dict[int, int] = defaultdict(int)
    for leg in legs:
        deltas[leg.account.pk] += leg.amount
    # Lock in a fixed order (by id) so two transfers between the same wallets cannot deadlock.
    locked = Account.objects.select_for_update().filter(pk__in=deltas).order_by("pk")
    for account in locked:
        if account.kind == AccountKind.WALLET and account.balance + deltas[account.pk] < 0:
            raise InsufficientFunds(
                _("Insufficient credit: the balance is %(balance)s, this needs %(needed)s.")
                % {"balance": format_money(account.balance), "needed": format_money_needed(-deltas[account.pk])}
            )


def _replayed(existing: Transaction, fingerprint: str) -> Transaction:
    if existing.fingerprint != fingerprint:
        raise IdempotencyConflict(
            _("The idempotency key '%(key)s' was already used for a different transaction.")
            % {"key": existing.idempotency_key}
        )
    return existing


def audit_ledger(accounts: Iterable[Account] | None = None) -> list[str]:
    """Problems found: currencies whose entries don't sum to zero, balances that differ from their sum."""
    problems = [
        f"entries in {row['account__currency']} sum to {row['total']}, not 0"
        for row in Entry.objects.values("account__currency").annotate(total=Sum("amount"))
        if row["total"] != 0
    ]
    sums = dict(Entry.objects.values_list("account_id").annotate(total=Sum("amount")))
    for account in accounts if accounts is not None else Account.objects.all():
        if account.balance != sums.get(account.pk, 0):
            problems.append(
                f"account {account.pk} balance {account.balance} != sum of entries {sums.get(account.pk, 0)}"
            )
    return problems
