"""Each credited top-up gets a receipt (method, Stripe id, time, the balance right after) and one e-mail."""

# ruff: noqa: F811

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stripe
from django.core import mail

from base.models import Preferences
from billing.models import Payment, Receipt, SentNotification
from billing.services.credits import adjust_credit
from billing.services.ledger import balance_of
from billing.services.receipts import method_of, send_receipt_email
from billing.services.stripe_payments.topups import credit_payment
from portal.celery import app as celery_app
from tests.support.localstripe import SECRET_KEY, deliver, events_for, paid_intent

FIFTY = 50_000_000
RECORDED = Path(__file__).with_name("recorded")


@pytest.fixture
def eager():
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


def post(client, event, capture):
    with capture(execute=True):
        return deliver(client, event)


@pytest.mark.django_db
def test_a_card_top_up_gets_a_receipt_with_the_balance_after_and_one_email(
    client, stripe_on, alice, eager, django_capture_on_commit_callbacks
):
    adjust_credit(alice, 12_340_000, reason="earlier credit", actor=None, key="earlier")
    intent = paid_intent(alice, 5000)
    (event,) = events_for(intent.id, "payment_intent.succeeded")

    for _ in range(3):  # Stripe delivers again; the receipt and its e-mail happen once
        assert post(client, event, django_capture_on_commit_callbacks).status_code == 200

    receipt = Receipt.objects.get(user=alice)
    payment = Payment.objects.get(payment_intent_id=intent.id)
    assert receipt.payment == payment
    assert (receipt.amount, receipt.method, receipt.payment_intent_id) == (FIFTY, "card", intent.id)
    assert receipt.balance_after == FIFTY + 12_340_000 == balance_of(alice)
    assert receipt.credited_at == payment.credited.created_at
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@example.com"]
    assert message.subject == "Starverse: receipt for your top-up of ¥50.00"
    assert "Payment method: Card" in message.body and intent.id in message.body
    assert "Balance after: ¥62.34" in message.body and "UTC+8" in message.body
    assert f"/billing/receipts/{receipt.pk}/" in message.body
    html = message.alternatives[0][0]
    assert "¥62.34" in html and intent.id in html


@pytest.mark.django_db
def test_the_balance_after_is_stored_not_recomputed(stripe_on, alice, eager, django_capture_on_commit_callbacks):
    intent = stripe.PaymentIntent.retrieve(paid_intent(alice, 5000).id, expand=["payment_method"])
    with django_capture_on_commit_callbacks(execute=True):
        credit_payment(intent)
    adjust_credit(alice, 1_000_000, reason="later", actor=None, key="later")
    assert Receipt.objects.get(user=alice).balance_after == FIFTY
    assert balance_of(alice) == FIFTY + 1_000_000


@pytest.mark.django_db
def test_crediting_again_writes_no_second_receipt_or_email(stripe_on, alice, eager, django_capture_on_commit_callbacks):
    intent = stripe.PaymentIntent.retrieve(paid_intent(alice, 5000).id, expand=["payment_method"])
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            credit_payment(intent)
    receipt = Receipt.objects.get(user=alice)
    send_receipt_email(receipt.pk)  # a retried task
    assert Receipt.objects.count() == 1
    assert len(mail.outbox) == 1
    assert SentNotification.objects.filter(key=f"receipt:{receipt.pk}").count() == 1


@pytest.mark.django_db
def test_the_email_speaks_the_recipients_language(stripe_on, alice, eager, django_capture_on_commit_callbacks):
    Preferences.objects.create(user=alice, language="zh-hans", time_zone="Asia/Shanghai")
    intent = stripe.PaymentIntent.retrieve(paid_intent(alice, 5000).id, expand=["payment_method"])
    with django_capture_on_commit_callbacks(execute=True):
        credit_payment(intent)
    (message,) = mail.outbox
    assert message.subject == "Starverse：¥50.00 充值收据"
    assert "支付方式: 银行卡" in message.body or "支付方式：银行卡" in message.body
    assert "充值后余额" in message.body and "年" in message.body and "UTC+8" in message.body
    assert "alice，您好" in message.body
    assert "Payment method" not in message.body


def recorded(name: str, user, method_type: str) -> stripe.PaymentIntent:
    data = json.loads((RECORDED / f"{name}.json").read_text().replace('"USER_ID"', json.dumps(str(user.pk))))
    # As Stripe answers a retrieve with expand=["payment_method"].
    data["payment_method"] = {"id": data["payment_method"], "object": "payment_method", "type": method_type}
    return stripe.PaymentIntent.construct_from(data, SECRET_KEY)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "method_type", "label"),
    [
        ("payment_intent_succeeded_alipay", "alipay", "Alipay"),
        ("payment_intent_succeeded_wechat_pay", "wechat_pay", "WeChat Pay"),
    ],
)
def test_alipay_and_wechat_pay_top_ups_say_so_on_the_receipt(
    settings, alice, eager, django_capture_on_commit_callbacks, name, method_type, label
):
    intent = recorded(name, alice, method_type)
    with django_capture_on_commit_callbacks(execute=True):
        credit_payment(intent)
    receipt = Receipt.objects.get(user=alice)
    assert receipt.method == method_type
    assert receipt.get_method_display() == label
    assert f"Payment method: {label}" in mail.outbox[0].body


def test_the_method_is_read_from_what_stripe_says():
    def intent(**fields):
        return stripe.PaymentIntent.construct_from({"id": "pi_1", **fields}, SECRET_KEY)

    assert method_of(intent(payment_method={"id": "pm_1", "object": "payment_method", "type": "alipay"})) == "alipay"
    assert method_of(intent(payment_method={"id": "card_1", "object": "card"})) == "card"
    assert method_of(intent(payment_method="card_1")) == "card"
    assert method_of(intent(payment_method="pm_1", payment_method_types=["wechat_pay"])) == "wechat_pay"
    assert method_of(intent(payment_method="pm_1", payment_method_types=["card", "alipay"])) == ""
    assert method_of(intent(payment_method={"id": "pm_1", "object": "payment_method", "type": "sepa_debit"})) == ""
