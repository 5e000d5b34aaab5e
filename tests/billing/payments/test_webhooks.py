"""Only signed webhooks count, and each PaymentIntent credits once (docs/RELIABILITY.md #9, #10)."""

# ruff: noqa: F811

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection

from billing.choices import TransactionKind
from billing.models import Payment, PaymentStatus, StripeEvent, Transaction
from billing.services.ledger import balance_of
from billing.services.stripe_payments.webhooks import process_event
from portal.celery import app as celery_app
from tests.support.localstripe import DECLINING_CARD, body_of, deliver, events_for, paid_intent, signature_for

FIFTY = 50_000_000


@pytest.fixture
def eager():
    """Run Celery tasks in the calling thread, so a test sees the effect of the webhook it sends."""
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


@pytest.fixture
def succeeded(stripe_on, alice):
    intent = paid_intent(alice, 5000)
    (event,) = events_for(intent.id, "payment_intent.succeeded")
    return event


def post(client, event, django_capture_on_commit_callbacks, **kwargs):
    with django_capture_on_commit_callbacks(execute=True):
        return deliver(client, event, **kwargs)


def topups(user) -> int:
    return Transaction.objects.filter(kind=TransactionKind.TOPUP, entries__account__owner=user).count()


@pytest.mark.django_db
def test_a_signed_succeeded_webhook_credits_the_wallet(
    client, succeeded, alice, eager, django_capture_on_commit_callbacks
):
    response = post(client, succeeded, django_capture_on_commit_callbacks)

    assert response.status_code == 200
    assert balance_of(alice) == FIFTY
    payment = Payment.objects.get(payment_intent_id=succeeded["data"]["object"]["id"])
    assert payment.status == PaymentStatus.SUCCEEDED
    assert payment.credited.idempotency_key == f"topup:{payment.payment_intent_id}"
    assert StripeEvent.objects.get(pk=succeeded["id"]).processed_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_STRIPE_SIGNATURE": ""},
        {"HTTP_STRIPE_SIGNATURE": "t=1,v1=deadbeef"},
        {"HTTP_STRIPE_SIGNATURE": "garbage"},
    ],
    ids=["missing", "empty", "wrong", "malformed"],
)
def test_a_webhook_without_a_valid_signature_is_refused(client, succeeded, alice, eager, headers):
    response = client.post("/stripe/webhook/", data=body_of(succeeded), content_type="application/json", **headers)

    assert response.status_code == 400
    assert "Invalid webhook" in response.json()["detail"]
    assert not StripeEvent.objects.exists()
    assert balance_of(alice) == 0


@pytest.mark.django_db
def test_a_webhook_signed_with_another_secret_is_refused(client, succeeded, alice, eager):
    response = deliver(client, succeeded, secret="whsec_someone_else")

    assert response.status_code == 400
    assert not StripeEvent.objects.exists()
    assert balance_of(alice) == 0


@pytest.mark.django_db
def test_a_tampered_body_is_refused(client, succeeded, alice, eager):
    payload = body_of(succeeded)
    signature = signature_for(payload)
    tampered = payload.replace(b'"amount": 5000', b'"amount": 500000')
    assert tampered != payload

    response = client.post(
        "/stripe/webhook/", data=tampered, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature
    )

    assert response.status_code == 400
    assert not StripeEvent.objects.exists()
    assert balance_of(alice) == 0


@pytest.mark.django_db
def test_a_replayed_webhook_with_an_old_timestamp_is_refused(client, succeeded, alice, eager):
    response = deliver(client, succeeded, timestamp=int(time.time()) - 301)

    assert response.status_code == 400
    assert "timestamp" in response.json()["detail"].lower()
    assert not StripeEvent.objects.exists()
    assert balance_of(alice) == 0


@pytest.mark.django_db
def test_five_deliveries_in_a_row_credit_once(client, succeeded, alice, eager, django_capture_on_commit_callbacks):
    answers = [post(client, succeeded, django_capture_on_commit_callbacks) for _ in range(5)]

    assert [a.status_code for a in answers] == [200] * 5
    assert [a.json().get("duplicate", False) for a in answers] == [False, True, True, True, True]
    assert balance_of(alice) == FIFTY
    assert topups(alice) == 1
    assert StripeEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_five_deliveries_at_once_credit_once(succeeded, alice, eager):
    from django.test import Client

    barrier = threading.Barrier(5)
    statuses: list[int] = []

    def send() -> None:
        barrier.wait()
        try:
            statuses.append(deliver(Client(), succeeded).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses == [200] * 5
    assert balance_of(alice) == FIFTY
    assert topups(alice) == 1


@pytest.mark.django_db(transaction=True)
def test_processing_one_event_in_five_threads_at_once_credits_once(succeeded, alice):
    """Two workers holding the same event (a redelivered task) race past the stored-event check."""
    StripeEvent.objects.create(id=succeeded["id"], type=succeeded["type"], payload=succeeded)
    barrier = threading.Barrier(5)
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            process_event(succeeded["id"])
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert balance_of(alice) == FIFTY
    assert topups(alice) == 1


@pytest.mark.django_db
def test_succeeded_before_created_gives_the_same_balance(
    client, stripe_on, alice, eager, django_capture_on_commit_callbacks
):
    intent = paid_intent(alice, 5000)
    created = {
        **events_for(intent.id, "payment_intent.succeeded")[0],
        "id": "evt_created_" + intent.id,
        "type": "payment_intent.created",
    }
    (succeeded,) = events_for(intent.id, "payment_intent.succeeded")

    for event in [succeeded, created, succeeded]:
        assert post(client, event, django_capture_on_commit_callbacks).status_code == 200

    assert balance_of(alice) == FIFTY
    assert topups(alice) == 1
    assert Payment.objects.get(payment_intent_id=intent.id).status == PaymentStatus.SUCCEEDED


@pytest.mark.django_db
def test_a_late_failure_event_does_not_undo_a_success(
    client, stripe_on, alice, eager, django_capture_on_commit_callbacks
):
    intent = paid_intent(alice, 5000)
    (succeeded,) = events_for(intent.id, "payment_intent.succeeded")
    failed = {**succeeded, "id": "evt_failed_" + intent.id, "type": "payment_intent.payment_failed"}

    post(client, succeeded, django_capture_on_commit_callbacks)
    post(client, failed, django_capture_on_commit_callbacks)

    assert balance_of(alice) == FIFTY
    assert Payment.objects.get(payment_intent_id=intent.id).status == PaymentStatus.SUCCEEDED


@pytest.mark.django_db
def test_a_forged_succeeded_event_for_a_declined_payment_credits_nothing(
    client, stripe_on, alice, eager, django_capture_on_commit_callbacks
):
    """The body is only a hint: the PaymentIntent is re-read from Stripe before money moves."""
    intent = paid_intent(alice, 5000, card=DECLINING_CARD)
    (failed,) = events_for(intent.id, "payment_intent.payment_failed")
    forged = {**failed, "id": "evt_forged_" + intent.id, "type": "payment_intent.succeeded"}

    post(client, failed, django_capture_on_commit_callbacks)
    post(client, forged, django_capture_on_commit_callbacks)

    assert balance_of(alice) == 0
    assert Payment.objects.get(payment_intent_id=intent.id).status == PaymentStatus.FAILED


@pytest.mark.django_db
def test_an_unknown_event_type_is_stored_and_harmless(
    client, stripe_on, alice, eager, django_capture_on_commit_callbacks
):
    event = {"id": "evt_unknown_1", "object": "event", "type": "customer.created", "data": {"object": {"id": "cus_1"}}}

    response = post(client, event, django_capture_on_commit_callbacks)

    assert response.status_code == 200
    stored = StripeEvent.objects.get(pk="evt_unknown_1")
    assert stored.processed_at is not None
    assert stored.payload == json.loads(body_of(event))
    assert balance_of(alice) == 0
    assert not Payment.objects.exists()


@pytest.mark.django_db
def test_a_webhook_that_is_not_a_stripe_event_is_refused(client, stripe_on):
    payload = b'["not", "an", "event"]'
    response = client.post(
        "/stripe/webhook/", data=payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature_for(payload)
    )

    assert response.status_code == 400
    assert not StripeEvent.objects.exists()
