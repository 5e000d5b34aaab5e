"""Charging spot chips held for a buyer who doesn't run on them yet, by the meter's own rule.

Chips a spot bid wins are taken from their last holder (with notice) and kept for the winner until
its job is placed on them. They are billed from the moment they are won, like a spot allocation of
those chips over that span would be (`billing.services.meter`): whole seconds from its start, the
spot price in force each second (the clearing price, never below the floor), rounded once, half up.

Each span is charged once, when it ends, by one CHARGE transaction (wallet -> revenue) whose key
names the span: a retry returns the first transaction and charges nothing more. A wallet never goes
below zero: a span is charged at most what the balance holds, and the rest (`owed - charged`) is
not collected (logged; the bid's credit hold normally covers a span, which lasts at most the
take-up time before the bid lapses).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.choices import AccountKind, TransactionKind
from billing.models import Account, Transaction
from billing.services.ledger import Leg, lock_wallets, platform_account, post_transaction
from billing.services.meter import SECOND, billing_mark, owed
from billing.services.pricing import PriceBook
from fleet.choices import AllocationMode
from kernel.money import format_amount

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReservedSpan:
    """Chips of one type held for `owner_id` over [started_at, ended_at); `key` names it for good."""

    key: str
    owner_id: int
    chip_type_id: int
    chips: int
    started_at: datetime
    ended_at: datetime
    label: str  # what was reserved, for the ledger memo: "bid 7 of job 12 (rtx-4090)"


@dataclass(frozen=True)
class ReservedCharge:
    """What one span cost and what was charged for it."""

    seconds: int
    owed: int
    charged: int
    transaction: Transaction | None

    @property
    def shortfall(self) -> int:
        return self.owed - self.charged


def span_owed(book: PriceBook, span: ReservedSpan) -> tuple[int, int]:
    """(whole seconds, what they cost) of the span, exactly as the meter bills a spot allocation."""
    mark = billing_mark(span.started_at, span.ended_at)
    seconds = (mark - span.started_at) // SECOND
    return seconds, owed(book, span.chip_type_id, AllocationMode.SPOT, span.chips, span.started_at, mark)


def charge_reserved_spans(spans: list[ReservedSpan], now: datetime) -> list[ReservedCharge]:
    """Charge each span to its owner's wallet (at most the balance), once per key; in the caller's transaction.

    Call it in the database transaction that ends the spans, so a span is ended and paid together
    or not at all.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("charge_reserved_spans needs the transaction that ends the spans.")
    if not spans:
        return []
    book = PriceBook.load({span.chip_type_id for span in spans})
    costs = [span_owed(book, span) for span in spans]
    revenue = platform_account(AccountKind.REVENUE)
    wallets = lock_wallets({span.owner_id for span, (_, cost) in zip(spans, costs, strict=True) if cost}, revenue)
    left = {owner_id: wallet.balance for owner_id, wallet in wallets.items()}
    charges = []
    for span, (seconds, cost) in zip(spans, costs, strict=True):
        charge = _charge(span, seconds, cost, wallets.get(span.owner_id), revenue, left, now)
        if charge.shortfall:
            logger.warning(
                "reserved chips (%s): %s of %s could not be charged, the wallet is empty",
                span.label,
                format_amount(charge.shortfall),
                format_amount(charge.owed),
            )
        charges.append(charge)
    return charges


def _charge(
    span: ReservedSpan,
    seconds: int,
    cost: int,
    wallet: Account | None,
    revenue: Account,
    left: dict[int, int],
    now: datetime,
) -> ReservedCharge:
    if cost == 0 or wallet is None:
        return ReservedCharge(seconds, cost, 0, None)
    existing = Transaction.objects.filter(idempotency_key=span.key).first()
    if existing is not None:  # charged by an earlier attempt that committed: nothing more
        paid = -sum(entry.amount for entry in existing.entries.filter(account=wallet))
        return ReservedCharge(seconds, cost, paid, existing)
    amount = min(cost, left[span.owner_id])
    if amount <= 0:
        return ReservedCharge(seconds, cost, 0, None)
    left[span.owner_id] -= amount
    txn = post_transaction(
        key=span.key,
        kind=TransactionKind.CHARGE,
        legs=[Leg(wallet, -amount), Leg(revenue, amount)],
        memo=StoredText(
            gettext_noop("Reserved spot chips, %(what)s: %(chips)s chip(s) won and not yet held, %(seconds)s s"),
            what=span.label,
            chips=span.chips,
            seconds=f"{seconds:,}",
        ),
        now=now,
    )
    return ReservedCharge(seconds, cost, amount, txn)
