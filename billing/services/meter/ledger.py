"""The meter's money side: locking the wallets, what each line is paid, one CHARGE transaction per wallet.

See `billing.services.meter` (the package's docstring) for the rules; this is the part that touches the ledger.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from django.db import connection

from billing.choices import TransactionKind
from billing.models import Account
from billing.services.ledger import Leg, fingerprint_of, lock_wallets, wallet_for
from billing.services.meter.columns import Lines, int_array
from kernel.money import MICROSECOND

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def lock_line_wallets(owner_ids: set[int], revenue: Account) -> dict[int, Account]:
    """Lock the wallets and the revenue account in id order (the ledger's lock order)."""
    wallets = lock_wallets(owner_ids, revenue)
    if missing := owner_ids - wallets.keys():  # a first charge: the wallet is created, then locked
        for owner_id in missing:
            wallet_for(_user(owner_id))
        wallets = lock_wallets(owner_ids, revenue)
    return wallets


def _user(owner_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=owner_id)


def pay(lines: Lines, wallets: dict[int, Account]) -> np.ndarray:
    """What each line is charged: its delta in full while the wallet covers it, in id order; the one
    that doesn't fit gets the rest, the ones after it nothing."""
    order = np.lexsort((lines.id, lines.owner))
    owner, delta = lines.owner[order], lines.delta[order]
    # What the owner's earlier lines (in id order) asked for before each line.
    asked = np.cumsum(delta)
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    before = asked - delta - np.repeat(asked[first] - delta[first], np.diff(np.r_[first, len(owner)]))
    balance = np.array([wallets[o].balance if o in wallets else 0 for o in owner.tolist()], dtype=np.int64)
    charged = np.empty_like(delta)
    charged[order] = np.clip(np.minimum(delta, balance - before), 0, None)
    return charged


def post_ledger(
    by_owner: list[tuple[int, Lines]], wallets: dict[int, Account], revenue: Account, now: datetime
) -> dict[int, int]:
    """One CHARGE transaction per wallet (wallet -> revenue, the sum of its lines' charges).

    Returns {owner id: transaction id}. The key names the wallet, the tick's time and the batch's
    first line of that wallet: no two ticks can produce it (that line's mark moves on when this one
    commits), so it never refuses a legitimate tick. What keeps a retry, a second beat or a
    redelivery from charging twice is the lines' charged totals, re-read under their locks.
    """
    if not by_owner:
        return {}
    tick = (now - EPOCH) // MICROSECOND
    owners, keys, fingerprints, memos, accounts, amounts = [], [], [], [], [], []
    for owner_id, bills in by_owner:
        wallet, amount = wallets[owner_id], int(bills.charged.sum())
        owners.append(owner_id)
        keys.append(f"meter:w{wallet.pk}:{tick}:l{bills.id[0]}")
        fingerprints.append(fingerprint_of(TransactionKind.CHARGE, [Leg(wallet, -amount), Leg(revenue, amount)]))
        memos.append(_memo(bills))
        accounts.append(wallet.pk)
        amounts.append(amount)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_transaction (idempotency_key, fingerprint, kind, memo, created_at)"
            " SELECT key, fingerprint, %s, memo, %s FROM unnest(%s::text[], %s::text[], %s::text[])"
            " AS v(key, fingerprint, memo) RETURNING idempotency_key, id",
            [TransactionKind.CHARGE, now, keys, fingerprints, memos],
        )
        ids = dict(cursor.fetchall())
        txns = [ids[key] for key in keys]
        # Both legs of every transaction in one INSERT: the ledger checks balance per statement (migration 0005).
        cursor.execute(
            "INSERT INTO billing_entry (transaction_id, account_id, amount, created_at)"
            " SELECT txn, account, amount, %s FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[])"
            " AS v(txn, account, amount)",
            [
                now,
                int_array(txns + txns),
                int_array(accounts + [revenue.pk] * len(txns)),
                int_array([-amount for amount in amounts] + amounts),
            ],
        )
    return dict(zip(owners, txns, strict=True))


def rows_by_owner(owners: np.ndarray):
    """(owner id, its row indices in id order) for each owner, owners in the order of their first row."""
    unique, first, inverse = np.unique(owners, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(unique)))
    groups = np.split(order, bounds[:-1])
    for index in np.argsort(first, kind="stable"):
        yield int(unique[index]), groups[index]


def _memo(bills: Lines) -> str:
    jobs = sorted(set(bills.job.tolist()))
    named = ", ".join(str(job) for job in jobs[:12]) + (f" and {len(jobs) - 12} more" if len(jobs) > 12 else "")
    chip_seconds = int((bills.new_chip_seconds - bills.chip_seconds).sum())
    return (
        f"Compute, job{'s' if len(jobs) > 1 else ''} {named}: {chip_seconds:,} chip-second(s)"
        f" on {int(bills.chips.sum())} chip(s)"
    )[:500]
