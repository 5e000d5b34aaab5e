"""Credit grants and operator adjustments, on top of the ledger service."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.choices import AccountKind, TransactionKind
from billing.models import OperatorSettings, Transaction
from billing.services.ledger import LedgerError, Leg, platform_account, post_transaction, wallet_for
from kernel.money import format_money


def grant_trial_credit(user, now=None) -> Transaction | None:
    """Grant the sign-up trial credit; the key makes a second grant for the same account a no-op."""
    amount = OperatorSettings.load().trial_credit
    if amount <= 0:
        return None
    key = f"trial-credit:{user.pk}"
    existing = Transaction.objects.filter(idempotency_key=key).first()
    if existing:
        return existing
    return post_transaction(
        key=key,
        kind=TransactionKind.TRIAL_CREDIT,
        legs=[Leg(platform_account(AccountKind.PROMOTIONS), -amount), Leg(wallet_for(user), amount)],
        memo=StoredText(gettext_noop("Welcome to Starverse: %(amount)s trial credit"), amount=format_money(amount)),
        now=now,
    )


def adjust_credit(user, amount: int, *, reason: str, actor, key: str, now=None) -> Transaction:
    """An operator's credit (positive) or debit (negative) to a user's wallet, with a reason."""
    reason = reason.strip()
    if not reason:
        raise LedgerError("A credit adjustment needs a reason.")
    if amount == 0:
        raise LedgerError("The adjustment amount cannot be zero.")
    return post_transaction(
        key=key,
        kind=TransactionKind.ADJUSTMENT,
        legs=[Leg(platform_account(AccountKind.ADJUSTMENTS), -amount), Leg(wallet_for(user), amount)],
        memo=reason,
        actor=actor,
        now=now,
    )
