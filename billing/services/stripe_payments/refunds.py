"""Refunds of a credited top-up by an operator: the wallet is debited first, then Stripe refunds the card."""

from __future__ import annotations

import stripe
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.choices import AccountKind, TransactionKind
from billing.models import Payment, PaymentStatus, Refund, Transaction
from billing.services.ledger import (
    InsufficientFunds,
    balance_of,
    platform_account,
    reverse_transaction,
    transfer,
    wallet_for,
)
from billing.services.stripe_payments.config import NONCE_RE, PaymentError, configure_stripe, to_minor
from kernel.money import format_money


def refundable_micros(payment: Payment) -> int:
    """The most an operator can refund now: unrefunded part of the payment, capped by the unspent balance."""
    if payment.credited_id is None:
        return 0
    return max(0, min(payment.amount - payment.refunded_amount, balance_of(payment.user)))


def refund_payment(payment: Payment, micros: int, *, reason: str, actor, nonce: str) -> Refund:
    """Refund `micros` of a credited payment: take it back from the wallet first, then refund on Stripe.

    The wallet is debited before the card is refunded, so money never leaves on Stripe while the
    user spends the same credit; a refused Stripe call is undone by reversing that debit. Refund
    rows are append-only, so the row is written last, once Stripe has answered.
    """
    reason = (reason or "").strip()
    if not reason:
        raise PaymentError(_("A refund needs a reason."))
    if micros <= 0:
        raise PaymentError(_("A refund amount must be positive."))
    if not NONCE_RE.match(nonce or ""):
        raise PaymentError(_("The form expired; reload the page and try again."))
    to_minor(micros, payment.currency)
    key = f"refund:{nonce}"
    existing = Refund.objects.filter(transaction__idempotency_key=key).first()
    if existing:
        return existing  # a resubmitted form
    txn = _reserve_refund(payment.pk, micros, reason=reason, actor=actor, key=key)
    configure_stripe()
    try:
        stripe_refund = stripe.Refund.create(
            payment_intent=payment.payment_intent_id,
            amount=to_minor(micros, payment.currency),
            metadata={"reason": reason[:400], "ledger_transaction": str(txn.pk)},
            idempotency_key=key,
        )
    except stripe.StripeError as error:
        _undo_reservation(payment.pk, txn, micros, str(error))
        raise PaymentError(_("Stripe refused the refund: %(why)s") % {"why": error.user_message or error}) from error
    try:
        return Refund.objects.create(
            payment=payment,
            stripe_refund_id=stripe_refund.id,
            amount=micros,
            reason=reason[:400],
            transaction=txn,
            created_by=actor,
        )
    except IntegrityError:  # the same form, submitted twice at once
        return Refund.objects.get(transaction=txn)


def _reserve_refund(payment_pk: int, micros: int, *, reason: str, actor, key: str):
    with transaction.atomic():
        payment = Payment.objects.select_for_update().select_related("user").get(pk=payment_pk)
        earlier = Transaction.objects.filter(idempotency_key=key).first()
        if earlier is not None:
            if Transaction.objects.filter(reverses=earlier).exists():
                raise PaymentError(_("This refund failed earlier; reload the page to try again."))
            return earlier  # an attempt that stopped before Stripe answered: finish it
        if payment.credited_id is None:
            raise PaymentError(_("Only a credited payment can be refunded."))
        unrefunded = payment.amount - payment.refunded_amount
        if micros > unrefunded:
            raise PaymentError(
                _("Refusing to refund %(amount)s: only %(unrefunded)s of this payment is not yet refunded.")
                % {"amount": format_money(micros), "unrefunded": format_money(unrefunded)}
            )
        try:
            txn = transfer(
                key=key,
                kind=TransactionKind.REFUND,
                source=wallet_for(payment.user),
                destination=platform_account(AccountKind.PAYMENT_CLEARING),
                amount=micros,
                memo=StoredText(
                    gettext_noop("Refund of top-up %(payment)s: %(reason)s"),
                    payment=payment.payment_intent_id,
                    reason=reason,
                ),
                actor=actor,
            )
        except InsufficientFunds:
            raise PaymentError(
                _("Refusing to refund %(amount)s: the user's unspent balance is only %(balance)s.")
                % {"amount": format_money(micros), "balance": format_money(balance_of(payment.user))}
            ) from None
        _set_refunded(payment, payment.refunded_amount + micros)
    return txn


def _undo_reservation(payment_pk: int, txn, micros: int, why: str) -> None:
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment_pk)
        reverse_transaction(txn, reason=f"Stripe refused the refund: {why}"[:400])
        _set_refunded(payment, payment.refunded_amount - micros)


def _set_refunded(payment: Payment, refunded: int) -> None:
    payment.refunded_amount = refunded
    if refunded == 0:
        payment.status = PaymentStatus.SUCCEEDED
    elif refunded == payment.amount:
        payment.status = PaymentStatus.REFUNDED
    else:
        payment.status = PaymentStatus.PARTIALLY_REFUNDED
    payment.save(update_fields=["refunded_amount", "status", "updated_at"])
