"""Training insurance: what a move to other chips cost the user, refunded as one ledger transaction.

When a job is moved off its chips (reclaimed, outbid, or its node lost), the user pays for nothing
they didn't get: the old chips' time whose work was not saved (from the last checkpoint, or the old
placement's start, to where the old work ended), and the new chips' time from their start until
training resumed on them. Both are priced by `PriceBook` at the prices the meter charged, and the
refund is paid from the platform's insurance account to the wallet, once per move (its key).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.choices import AccountKind, TransactionKind
from billing.models import Transaction
from billing.services.ledger import Leg, platform_account, post_transaction, wallet_for
from billing.services.pricing import PriceBook
from kernel.money import cost_of_integral


class Billed(Protocol):
    """What insurance needs of an allocation: its chips, their type and mode, and when it ran."""

    chip_type_id: int
    mode: str
    chips: int
    started_at: datetime
    ended_at: datetime | None


def insurance_amount(
    old: Sequence[Billed],
    new: Sequence[Billed],
    *,
    lost_from: datetime | None,
    work_end: datetime,
    notice_at: datetime,
    resumed_at: datetime,
) -> int:
    """The old chips over [lost_from, work_end) (nothing when no work was lost) plus the new chips over
    [their start, resumed_at), in micro-units, rounded once."""
    book = PriceBook.load({a.chip_type_id for a in [*old, *new]})
    exact = 0  # Σ chips × price × microseconds, rounded once at the end
    for allocation in old if lost_from is not None else ():
        start = max(lost_from, allocation.started_at)
        end = min(work_end, allocation.ended_at or notice_at)
        if end > start:
            exact += allocation.chips * book.integral(allocation.chip_type_id, allocation.mode, start, end)
    for allocation in new:
        end = min(resumed_at, allocation.ended_at or resumed_at)
        if end > allocation.started_at:
            exact += allocation.chips * book.integral(
                allocation.chip_type_id, allocation.mode, allocation.started_at, end
            )
    return cost_of_integral(exact)


# A refund's ledger memo: "Training insurance for job 12: spot reclaimed" (the reason: a MigrationReason's
# label, lower-cased in English, or "island left").
INSURANCE_MEMO = gettext_noop("Training insurance for job %(job)s: %(reason)s")


def pay_insurance(owner, amount: int, *, key: str, memo: str | StoredText, now: datetime) -> Transaction:
    """Refund `amount` from the insurance account to the owner's wallet; `key` makes a retry a no-op."""
    return post_transaction(
        key=key,
        kind=TransactionKind.REFUND,
        legs=[Leg(platform_account(AccountKind.INSURANCE), -amount), Leg(wallet_for(owner), amount)],
        memo=memo,
        now=now,
    )
