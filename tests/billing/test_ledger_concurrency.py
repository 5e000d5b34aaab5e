"""Races with real threads on real PostgreSQL (docs/RELIABILITY.md #3, #5)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing.choices import AccountKind, TransactionKind
from billing.models import Entry, Transaction
from billing.services.ledger import (
    IdempotencyConflict,
    InsufficientFunds,
    balance_of,
    platform_account,
    transfer,
    wallet_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

UNIT = 1_000_000


def run_at_once(count: int, work):
    """Run `work(i)` in `count` threads released together; each returns a result or its exception."""
    barrier = Barrier(count)

    def attempt(index: int):
        barrier.wait()
        try:
            return work(index)
        except Exception as error:  # noqa: BLE001 - the outcome is what the test inspects
            return error
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(attempt, range(count)))


def fund(user, amount):
    transfer(
        key=f"fund-{user.pk}",
        kind=TransactionKind.ADJUSTMENT,
        source=platform_account(AccountKind.ADJUSTMENTS),
        destination=wallet_for(user),
        amount=amount,
    )


def test_fifty_threads_spending_one_from_ten_leave_exactly_ten_successes(alice):
    fund(alice, 10 * UNIT)
    wallet, revenue = wallet_for(alice), platform_account(AccountKind.REVENUE)

    def spend(index):
        return transfer(
            key=f"spend-{index}", kind=TransactionKind.CHARGE, source=wallet, destination=revenue, amount=UNIT
        )

    outcomes = run_at_once(50, spend)

    assert sum(isinstance(o, Transaction) for o in outcomes) == 10
    assert sum(isinstance(o, InsufficientFunds) for o in outcomes) == 40
    assert balance_of(alice) == 0


def test_without_the_service_check_the_database_alone_still_stops_the_overdraft(alice):
    """The race a naive read-check-write would lose: here nothing checks in Python at all."""
    fund(alice, 10 * UNIT)
    wallet, revenue = wallet_for(alice), platform_account(AccountKind.REVENUE)

    def spend_unchecked(index):
        with transaction.atomic():
            now = timezone.now()
            txn = Transaction.objects.create(
                idempotency_key=f"raw-{index}", fingerprint="-", kind=TransactionKind.CHARGE, created_at=now
            )
            Entry.objects.bulk_create(
                [
                    Entry(transaction=txn, account=wallet, amount=-UNIT, created_at=now),
                    Entry(transaction=txn, account=revenue, amount=UNIT, created_at=now),
                ]
            )
        return txn

    outcomes = run_at_once(50, spend_unchecked)

    assert sum(isinstance(o, Transaction) for o in outcomes) == 10
    assert all(isinstance(o, (Transaction, IntegrityError)) for o in outcomes)
    assert balance_of(alice) == 0


def test_twenty_concurrent_posts_with_one_key_have_one_effect_and_one_answer(alice):
    source, destination = platform_account(AccountKind.PROMOTIONS), wallet_for(alice)

    def credit(index):
        return transfer(
            key="same-key",
            kind=TransactionKind.ADJUSTMENT,
            source=source,
            destination=destination,
            amount=5 * UNIT,
        )

    outcomes = run_at_once(20, credit)

    assert all(isinstance(o, Transaction) for o in outcomes), outcomes
    assert len({o.pk for o in outcomes}) == 1
    assert Transaction.objects.filter(idempotency_key="same-key").count() == 1
    assert balance_of(alice) == 5 * UNIT


def test_concurrent_posts_with_one_key_but_different_amounts_have_one_effect(alice):
    source, destination = platform_account(AccountKind.PROMOTIONS), wallet_for(alice)

    def credit(index):
        return transfer(
            key="contested",
            kind=TransactionKind.ADJUSTMENT,
            source=source,
            destination=destination,
            amount=(1 + index % 2) * UNIT,
        )

    outcomes = run_at_once(20, credit)

    winners = [o for o in outcomes if isinstance(o, Transaction)]
    assert len({o.pk for o in winners}) == 1
    assert all(isinstance(o, (Transaction, IdempotencyConflict)) for o in outcomes)
    assert any(isinstance(o, IdempotencyConflict) for o in outcomes)
    assert balance_of(alice) in {UNIT, 2 * UNIT}
    assert Transaction.objects.count() == 1
