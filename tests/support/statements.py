"""Statements and operator reports. Builders for charges posted like the meter posts them."""

from __future__ import annotations

from datetime import UTC, datetime

from billing.choices import AccountKind, TransactionKind
from billing.models import Charge, Payment, PaymentStatus, Refund
from billing.services.credits import adjust_credit
from billing.services.ledger import platform_account, transfer, wallet_for
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job, Node
from kernel.money import to_micros


def at(text: str) -> datetime:
    """ "2026-03-10 10:00" in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fund(user, amount: str, when: str):
    return adjust_credit(
        user, to_micros(amount), reason="test credit", actor=None, key=f"fund:{user.pk}:{when}", now=at(when)
    )


def make_job(user, name: str = "") -> Job:
    return Job.objects.create(
        owner=user,
        name=name,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=to_micros("100"),
        status=JobStatus.RUNNING,
    )


def make_allocation(job: Job, slug: str, chips: int, started: str, mode: str = AllocationMode.ON_DEMAND, ended=None):
    node = Node.objects.filter(pool__chip_type__slug=slug).order_by("hostname").first()
    return Allocation.objects.create(
        job=job,
        node=node,
        chip_type=ChipType.objects.get(slug=slug),
        chips=chips,
        mode=mode,
        epoch=1,
        started_at=at(started),
        ended_at=at(ended) if ended else None,
        billed_through=at(started),
    )


def charge(allocation: Allocation, started: str, ended: str, amount: str) -> Charge:
    """A meter charge: the ledger transfer wallet → revenue and its Charge row, posted when it ended."""
    start, end = at(started), at(ended)
    owner = allocation.job.owner
    txn = transfer(
        key=f"charge:{allocation.pk}:{end.isoformat()}",
        kind=TransactionKind.CHARGE,
        source=wallet_for(owner),
        destination=platform_account(AccountKind.REVENUE),
        amount=to_micros(amount),
        memo=f"Compute for job {allocation.job_id}",
        now=end,
    )
    return Charge.objects.create(
        allocation=allocation,
        job=allocation.job,
        owner=owner,
        chip_type=allocation.chip_type,
        mode=allocation.mode,
        chips=allocation.chips,
        started_at=start,
        ended_at=end,
        seconds=int((end - start).total_seconds()),
        chip_seconds=allocation.chips * int((end - start).total_seconds()),
        amount=to_micros(amount),
        transaction=txn,
        created_at=end,
    )


def top_up(user, amount: str, when: str, intent: str) -> Payment:
    txn = transfer(
        key=f"topup:{intent}",
        kind=TransactionKind.TOPUP,
        source=platform_account(AccountKind.PAYMENT_CLEARING),
        destination=wallet_for(user),
        amount=to_micros(amount),
        memo=f"Top-up {intent}",
        now=at(when),
    )
    return Payment.objects.create(
        user=user,
        payment_intent_id=intent,
        amount=to_micros(amount),
        currency="CNY",
        status=PaymentStatus.SUCCEEDED,
        credited=txn,
    )


def refund(payment: Payment, amount: str, when: str, actor=None) -> Refund:
    txn = transfer(
        key=f"refund:{payment.payment_intent_id}:{when}",
        kind=TransactionKind.REFUND,
        source=wallet_for(payment.user),
        destination=platform_account(AccountKind.PAYMENT_CLEARING),
        amount=to_micros(amount),
        memo=f"Refund of {payment.payment_intent_id}",
        now=at(when),
    )
    return Refund.objects.create(
        payment=payment,
        stripe_refund_id=f"re_{payment.pk}",
        amount=to_micros(amount),
        reason="test",
        transaction=txn,
        created_by=actor,
    )


def seed_march(alice, bob) -> dict:
    """Alice: ¥100 in February; in March a ¥50 top-up, ¥7.05 of compute, a ¥10 refund; ¥0.40 in April.

    Bob: ¥9.80 of H100 time on 10 March, which Alice must never see.
    """
    fund(alice, "100", "2026-02-20 00:00")
    payment = top_up(alice, "50", "2026-03-05 12:00", "pi_alice_1")
    alpha, beta = make_job(alice, "alpha"), make_job(alice, "beta")
    rtx = make_allocation(alpha, "rtx-4090", 2, "2026-03-10 10:00", ended="2026-04-01 00:10")
    charge(rtx, "2026-03-10 10:00", "2026-03-10 11:00", "2.40")
    charge(rtx, "2026-03-10 23:30", "2026-03-11 00:30", "2.40")
    a100 = make_allocation(beta, "a100-80g", 1, "2026-03-11 09:00", ended="2026-03-11 09:30")
    charge(a100, "2026-03-11 09:00", "2026-03-11 09:30", "2.25")
    refund(payment, "10", "2026-03-20 12:00")
    charge(rtx, "2026-04-01 00:00", "2026-04-01 00:10", "0.40")

    fund(bob, "50", "2026-03-01 00:00")
    secret = make_job(bob, "bobs-secret-run")
    h100 = make_allocation(secret, "h100-80g", 1, "2026-03-10 12:00", ended="2026-03-10 13:00")
    charge(h100, "2026-03-10 12:00", "2026-03-10 13:00", "9.80")
    return {"alpha": alpha, "beta": beta, "secret": secret, "payment": payment}
