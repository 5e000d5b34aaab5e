"""Missed webhooks are recovered once (docs/RELIABILITY.md #12); operator refunds are limited to unspent credit."""

# ruff: noqa: F811

from __future__ import annotations

import html
import io

import pytest
import stripe
from django.core.management import call_command

import billing.admin_payments  # noqa: F401 - registers the payments admin before the URLconf loads
from billing.choices import AccountKind, TransactionKind
from billing.models import Payment, PaymentStatus, Refund, StripeEvent, Transaction
from billing.services.ledger import balance_of, platform_account, transfer, wallet_for
from tests.support.accounts import PASSWORD
from tests.support.localstripe import paid_intent

FIFTY = 50_000_000


def reconcile() -> str:
    out = io.StringIO()
    call_command("reconcile_payments", stdout=out)
    return out.getvalue()


def spend(user, micros: int) -> None:
    transfer(
        key=f"test-spend:{user.pk}:{micros}",
        kind=TransactionKind.CHARGE,
        source=wallet_for(user),
        destination=platform_account(AccountKind.REVENUE),
        amount=micros,
    )


@pytest.mark.django_db
def test_a_missed_webhook_is_credited_by_reconcile_once(stripe_on, alice):
    intent = paid_intent(alice, 5000)  # no webhook reaches this server

    first = reconcile()
    second = reconcile()

    assert balance_of(alice) == FIFTY
    assert Transaction.objects.filter(idempotency_key=f"topup:{intent.id}").count() == 1
    assert Payment.objects.get(payment_intent_id=intent.id).status == PaymentStatus.SUCCEEDED
    assert "processed evt_" in first
    assert "0 missed event(s) processed." in second


@pytest.mark.django_db
def test_reconcile_after_the_webhook_was_processed_changes_nothing(stripe_on, alice):
    intent = paid_intent(alice, 5000)
    reconcile()
    StripeEvent.objects.update(processed_at=None)  # as if the webhook's task had died half-way

    reconcile()

    assert balance_of(alice) == FIFTY
    assert Transaction.objects.filter(idempotency_key=f"topup:{intent.id}").count() == 1


@pytest.fixture
def credited(stripe_on, alice) -> Payment:
    intent = paid_intent(alice, 5000)
    reconcile()
    return Payment.objects.get(payment_intent_id=intent.id)


def refund_page(client, payment):
    return f"/admin/billing/payment/{payment.pk}/refund/"


def post_refund(client, payment, amount: str, reason: str = "customer asked"):
    page = client.get(refund_page(client, payment))
    nonce = page.context["form"]["nonce"].value()
    return client.post(refund_page(client, payment), {"amount": amount, "reason": reason, "nonce": nonce})


@pytest.mark.django_db
def test_an_operator_refunds_part_of_the_unspent_balance(client, credited, alice, operator):
    client.login(username="op", password=PASSWORD)

    response = post_refund(client, credited, "20.00")

    assert response.status_code == 302
    refund = Refund.objects.get()
    assert refund.amount == 20_000_000
    assert balance_of(alice) == 30_000_000
    assert refund.transaction.kind == TransactionKind.REFUND
    credited.refresh_from_db()
    assert credited.refunded_amount == 20_000_000
    assert credited.status == PaymentStatus.PARTIALLY_REFUNDED
    on_stripe = stripe.Refund.retrieve(refund.stripe_refund_id)
    assert (on_stripe.amount, on_stripe.payment_intent) == (2000, credited.payment_intent_id)


@pytest.mark.django_db
def test_a_refund_larger_than_the_unspent_balance_is_refused(client, credited, alice, operator):
    spend(alice, 35_000_000)
    client.login(username="op", password=PASSWORD)

    response = post_refund(client, credited, "20.00")

    assert response.status_code == 200
    assert "the user's unspent balance is only ¥15.00" in html.unescape(response.content.decode())
    assert balance_of(alice) == 15_000_000
    assert not Refund.objects.exists()
    credited.refresh_from_db()
    assert (credited.refunded_amount, credited.status) == (0, PaymentStatus.SUCCEEDED)
    assert stripe.Refund.list(payment_intent=credited.payment_intent_id).data == []


@pytest.mark.django_db
def test_a_refund_larger_than_the_payment_is_refused(client, credited, alice, operator):
    client.login(username="op", password=PASSWORD)
    post_refund(client, credited, "40.00")

    response = post_refund(client, credited, "20.00")

    assert "only ¥10.00 of this payment is not yet refunded" in response.content.decode()
    assert balance_of(alice) == 10_000_000
    assert Refund.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("amount", ["abc", "-5", "0", "1.234"])
def test_a_refund_with_a_bad_amount_is_refused(client, credited, alice, operator, amount):
    client.login(username="op", password=PASSWORD)

    response = post_refund(client, credited, amount)

    assert response.status_code == 200
    assert response.context["form"].errors["amount"]
    assert balance_of(alice) == FIFTY
    assert not Refund.objects.exists()


@pytest.mark.django_db
def test_a_resubmitted_refund_form_refunds_once(client, credited, alice, operator):
    client.login(username="op", password=PASSWORD)
    page = client.get(refund_page(client, credited))
    data = {"amount": "10.00", "reason": "double click", "nonce": page.context["form"]["nonce"].value()}

    client.post(refund_page(client, credited), data)
    client.post(refund_page(client, credited), data)

    assert Refund.objects.count() == 1
    assert balance_of(alice) == 40_000_000
