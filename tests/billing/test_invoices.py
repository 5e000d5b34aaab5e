"""Invoice requests: for a closed month's payments, with the customer's details copied, once; issued with a number."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import translation

from base.models import AuditEntry
from billing.models import InvoiceDetails, InvoiceRequest, InvoiceStatus
from billing.services.invoices import InvoiceError, invoice_amount, mark_issued, request_invoice
from kernel.money import to_micros
from tests.support.statements import at, seed_march

pytestmark = pytest.mark.django_db


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


@pytest.fixture
def details(alice):
    return InvoiceDetails.objects.create(
        user=alice, company_name="星河科技有限公司", taxpayer_id="91350100M000100Y43", address="福州市鼓楼区 1 号"
    )


def test_the_amount_is_the_months_top_ups_less_its_refunds(march, alice, bob):
    assert invoice_amount(alice, "2026-03") == to_micros("40")  # ¥50 top-up, ¥10 refunded
    assert invoice_amount(alice, "2026-04") == 0  # usage only
    assert invoice_amount(bob, "2026-03") == 0  # an operator's credit is not a payment


def test_a_request_copies_the_details_as_they_are(march, alice, details):
    made = request_invoice(alice, "2026-03")
    details.company_name = "改名后的公司"
    details.save()
    made.refresh_from_db()
    assert (made.month, made.amount, made.status) == ("2026-03", to_micros("40"), InvoiceStatus.REQUESTED)
    copied = (made.company_name, made.taxpayer_id, made.address)
    assert copied == ("星河科技有限公司", "91350100M000100Y43", "福州市鼓楼区 1 号")
    assert made.invoice_number == "" and made.issued_at is None


def test_without_details_the_request_is_refused(march, alice):
    with pytest.raises(InvoiceError, match="Add your invoice details"):
        request_invoice(alice, "2026-03")
    assert not InvoiceRequest.objects.exists()


def test_a_month_not_over_is_refused(march, alice, details):
    with pytest.raises(InvoiceError, match="once the month 2026-03 is over"):
        request_invoice(alice, "2026-03", now=at("2026-03-31 12:00"))


def test_a_month_with_nothing_paid_is_refused(march, alice, details):
    with pytest.raises(InvoiceError, match="Nothing was paid in 2026-04"):
        request_invoice(alice, "2026-04")


def test_a_second_request_for_the_month_is_refused(march, alice, details):
    request_invoice(alice, "2026-03")
    with pytest.raises(InvoiceError, match="already been requested"):
        request_invoice(alice, "2026-03")
    assert InvoiceRequest.objects.count() == 1


def test_the_database_keeps_one_request_per_user_and_month(march, alice, details):
    made = request_invoice(alice, "2026-03")
    with pytest.raises(IntegrityError), transaction.atomic():
        InvoiceRequest.objects.create(
            user=alice, month="2026-03", amount=1, company_name="x", taxpayer_id=made.taxpayer_id, address="y"
        )


def test_an_issued_request_needs_a_number_in_the_database(march, alice, details):
    made = request_invoice(alice, "2026-03")
    with pytest.raises(IntegrityError), transaction.atomic():
        InvoiceRequest.objects.filter(pk=made.pk).update(status=InvoiceStatus.ISSUED)


def test_a_bad_month_is_refused(alice, details):
    with pytest.raises(InvoiceError, match="is not a month"):
        request_invoice(alice, "2026-13")


def test_refusals_speak_chinese(march, alice):
    with translation.override("zh-hans"), pytest.raises(InvoiceError) as caught:
        request_invoice(alice, "2026-03")
    assert str(caught.value) == "请先填写开票信息（公司名称、统一社会信用代码、地址）。"


def test_marking_issued_sets_number_time_operator_and_audits(march, alice, details, operator):
    made = request_invoice(alice, "2026-03")
    issued = mark_issued(made, " 24110000000012345678 ", actor=operator, now=at("2026-04-02 03:00"))
    assert issued.status == InvoiceStatus.ISSUED
    assert (issued.invoice_number, issued.issued_at, issued.issued_by) == (
        "24110000000012345678",
        at("2026-04-02 03:00"),
        operator,
    )
    entry = AuditEntry.objects.get(action="invoice.issue")
    assert entry.actor == operator and entry.target_id == str(made.pk)
    assert entry.details["invoice_number"] == "24110000000012345678" and entry.details["month"] == "2026-03"
    # The same form again changes nothing; another number is refused.
    assert mark_issued(issued, "24110000000012345678", actor=operator).issued_at == at("2026-04-02 03:00")
    with pytest.raises(InvoiceError, match="already issued as invoice 24110000000012345678"):
        mark_issued(issued, "999", actor=operator)
    assert AuditEntry.objects.filter(action="invoice.issue").count() == 1


def test_marking_issued_without_a_number_is_refused(march, alice, details, operator):
    made = request_invoice(alice, "2026-03")
    with pytest.raises(InvoiceError, match="Enter the invoice number"):
        mark_issued(made, "  ", actor=operator)
    made.refresh_from_db()
    assert made.status == InvoiceStatus.REQUESTED
