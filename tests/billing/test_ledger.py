"""The ledger's rules, each enforced by the database and not only by Python (docs/RELIABILITY.md #1 to #4)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, InternalError, connection, transaction
from django.db.utils import DatabaseError

from billing.choices import AccountKind, TransactionKind
from billing.models import AppendOnlyError, Entry, Transaction
from billing.services.credits import grant_trial_credit
from billing.services.ledger import (
    IdempotencyConflict,
    InsufficientFunds,
    LedgerError,
    Leg,
    UnbalancedTransaction,
    audit_ledger,
    balance_of,
    platform_account,
    post_transaction,
    reverse_transaction,
    transfer,
    wallet_for,
)

pytestmark = pytest.mark.django_db

TEN = 10_000_000


def fund(user, amount=TEN, key="fund"):
    return transfer(
        key=key,
        kind=TransactionKind.ADJUSTMENT,
        source=platform_account(AccountKind.ADJUSTMENTS),
        destination=wallet_for(user),
        amount=amount,
    )


def test_a_posted_transaction_moves_the_balances_of_both_accounts(alice):
    fund(alice)
    assert balance_of(alice) == TEN
    assert platform_account(AccountKind.ADJUSTMENTS).balance == -TEN
    assert audit_ledger() == []


def test_entries_sum_to_zero_across_many_transactions(alice, bob):
    fund(alice, key="a")
    fund(bob, key="b")
    transfer(
        key="spend",
        kind=TransactionKind.CHARGE,
        source=wallet_for(alice),
        destination=platform_account(AccountKind.REVENUE),
        amount=3,
    )
    assert sum(Entry.objects.values_list("amount", flat=True)) == 0


def test_python_refuses_an_unbalanced_transaction(alice):
    with pytest.raises(UnbalancedTransaction):
        post_transaction(
            key="bad",
            kind=TransactionKind.ADJUSTMENT,
            legs=[Leg(wallet_for(alice), 5), Leg(platform_account(AccountKind.ADJUSTMENTS), -4)],
        )
    assert not Transaction.objects.exists()


def test_the_database_refuses_an_unbalanced_transaction(alice):
    """Bypassing the service: the statement-level trigger refuses the INSERT itself."""
    wallet = wallet_for(alice)
    with pytest.raises(IntegrityError, match="unbalanced"), transaction.atomic():
        txn = Transaction.objects.create(
            idempotency_key="raw", fingerprint="x", kind="adjustment", created_at="2026-01-01T00:00:00Z"
        )
        Entry.objects.create(transaction=txn, account=wallet, amount=5, created_at=txn.created_at)
    assert balance_of(alice) == 0


@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_legs_of_one_transaction_split_over_two_statements(alice):
    """All legs go in one INSERT; a first half that doesn't balance on its own is refused."""
    wallet, promotions = wallet_for(alice), platform_account(AccountKind.PROMOTIONS)
    with pytest.raises(IntegrityError, match="unbalanced"), transaction.atomic():
        txn = Transaction.objects.create(
            idempotency_key="raw", fingerprint="x", kind="adjustment", created_at="2026-01-01T00:00:00Z"
        )
        Entry.objects.create(transaction=txn, account=wallet, amount=5, created_at=txn.created_at)
        Entry.objects.create(transaction=txn, account=promotions, amount=-5, created_at=txn.created_at)
    assert not Transaction.objects.exists()
    assert balance_of(alice) == 0


@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_a_transaction_without_entries():
    with pytest.raises(IntegrityError, match="no entries"), transaction.atomic():
        Transaction.objects.create(
            idempotency_key="empty", fingerprint="x", kind="adjustment", created_at="2026-01-01T00:00:00Z"
        )


def test_a_wallet_cannot_be_overdrawn_through_the_service(alice):
    fund(alice, amount=5)
    with pytest.raises(InsufficientFunds, match="balance is"):
        transfer(
            key="too-much",
            kind=TransactionKind.CHARGE,
            source=wallet_for(alice),
            destination=platform_account(AccountKind.REVENUE),
            amount=6,
        )
    assert balance_of(alice) == 5
    assert not Transaction.objects.filter(idempotency_key="too-much").exists()


def test_the_database_refuses_to_overdraw_a_wallet_even_around_the_service(alice):
    fund(alice, amount=5)
    revenue = platform_account(AccountKind.REVENUE)
    with pytest.raises(IntegrityError, match="wallet_never_negative"), transaction.atomic():
        txn = Transaction.objects.create(
            idempotency_key="raw", fingerprint="x", kind="charge", created_at="2026-01-01T00:00:00Z"
        )
        Entry.objects.bulk_create(
            [
                Entry(transaction=txn, account=wallet_for(alice), amount=-6, created_at=txn.created_at),
                Entry(transaction=txn, account=revenue, amount=6, created_at=txn.created_at),
            ]
        )
    assert balance_of(alice) == 5


def test_entries_cannot_be_changed_or_deleted_through_the_orm(alice):
    fund(alice)
    entry = Entry.objects.first()
    entry.amount = 1
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        Entry.objects.update(amount=1)
    with pytest.raises(AppendOnlyError):
        Entry.objects.all().delete()
    with pytest.raises(AppendOnlyError):
        Transaction.objects.first().delete()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE billing_entry SET amount = amount * 2",
        "DELETE FROM billing_entry",
        "UPDATE billing_transaction SET memo = 'edited'",
        "DELETE FROM billing_transaction",
        "UPDATE billing_price SET on_demand_per_hour = 1",
    ],
)
def test_raw_sql_cannot_change_or_delete_ledger_rows_or_prices(alice, catalog, sql):
    fund(alice)
    with (
        pytest.raises((InternalError, DatabaseError), match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert balance_of(alice) == TEN


def test_the_same_key_twice_posts_once_and_returns_the_first_transaction(alice):
    first = fund(alice, key="once")
    second = fund(alice, key="once")
    assert first.pk == second.pk
    assert balance_of(alice) == TEN


def test_the_same_key_with_a_different_amount_is_refused_and_changes_nothing(alice):
    fund(alice, key="once")
    with pytest.raises(IdempotencyConflict, match="already used"):
        fund(alice, amount=TEN + 1, key="once")
    assert balance_of(alice) == TEN
    assert Transaction.objects.count() == 1


def test_a_correction_is_a_reversing_transaction(alice):
    original = fund(alice)
    reversal = reverse_transaction(original, reason="granted by mistake")
    assert balance_of(alice) == 0
    assert reversal.reverses_id == original.pk
    assert "granted by mistake" in reversal.memo
    assert Transaction.objects.count() == 2


def test_a_transaction_is_reversed_at_most_once(alice):
    original = fund(alice, amount=TEN)
    fund(alice, amount=TEN, key="more")
    first = reverse_transaction(original, reason="oops")
    assert reverse_transaction(original, reason="oops").pk == first.pk
    assert balance_of(alice) == TEN


def test_a_reversal_that_would_overdraw_the_wallet_is_refused(alice):
    original = fund(alice)
    transfer(
        key="spent",
        kind=TransactionKind.CHARGE,
        source=wallet_for(alice),
        destination=platform_account(AccountKind.REVENUE),
        amount=TEN,
    )
    with pytest.raises(InsufficientFunds):
        reverse_transaction(original, reason="chargeback")
    assert balance_of(alice) == 0


def test_a_reversal_needs_a_reason(alice):
    with pytest.raises(LedgerError, match="reason"):
        reverse_transaction(fund(alice), reason="  ")


def test_the_trial_credit_is_granted_once_per_account(alice):
    first = grant_trial_credit(alice)
    second = grant_trial_credit(alice)
    assert first.pk == second.pk
    assert balance_of(alice) == TEN
    assert first.kind == TransactionKind.TRIAL_CREDIT


def test_the_audit_finds_a_balance_that_drifted_from_its_entries(alice):
    fund(alice)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE billing_account SET balance = balance + 1 WHERE owner_id = %s", [alice.pk])
    problems = audit_ledger()
    assert any("balance" in problem for problem in problems)
    with connection.cursor() as cursor:  # put it back so the per-test ledger check passes
        cursor.execute("UPDATE billing_account SET balance = balance - 1 WHERE owner_id = %s", [alice.pk])
