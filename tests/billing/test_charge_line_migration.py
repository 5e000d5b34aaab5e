"""Billing migration 0010 keeps the per-allocation Charge rows written before it: each gets
`chip_seconds = chips × seconds` (the append-only trigger is off for that one UPDATE only), and
rows that name no allocation are accepted from then on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.utils import IntegrityError

from billing.choices import AccountKind, TransactionKind
from billing.models import Charge
from billing.services.ledger import platform_account, transfer, wallet_for
from fleet.choices import JobStatus
from tests.support.meter import T0, fund, open_allocation
from tests.support.migrating import latest, migrate

BEFORE = ("billing", "0009_notification_settings")


@pytest.mark.django_db(transaction=True)
def test_rows_from_before_get_their_chip_seconds_and_stay_append_only(alice, enroll, planning_job):  # noqa: F811
    fund(alice)
    node, _ = enroll("migrated", chips=8)
    allocation = open_allocation(planning_job(status=JobStatus.RUNNING), node, chips=3)
    paid = transfer(
        key="old-charge",
        kind=TransactionKind.CHARGE,
        source=wallet_for(alice),
        destination=platform_account(AccountKind.REVENUE),
        amount=5,
    )
    newest = latest()
    migrate([BEFORE])
    try:
        with connection.cursor() as cursor:  # a row as the meter wrote them before: one per allocation
            cursor.execute(
                "INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips, started_at,"
                " ended_at, seconds, amount, transaction_id, created_at) VALUES (%s, %s, %s, %s, %s, 3, %s, %s, 7, 5,"
                " %s, %s)",
                [
                    allocation.pk,
                    allocation.job_id,
                    alice.pk,
                    allocation.chip_type_id,
                    allocation.mode,
                    T0,
                    T0 + timedelta(seconds=7),
                    paid.pk,
                    T0,
                ],
            )
    finally:
        migrate(newest)

    row = Charge.objects.get()
    assert (row.allocation_id, row.chips, row.seconds, row.chip_seconds, row.amount) == (allocation.pk, 3, 7, 21, 5)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        Charge.objects.filter(pk=row.pk).update(chip_seconds=0)
