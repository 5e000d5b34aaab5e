"""The receipt page, the invoice details form, requesting an invoice from a statement, and issuing it in the admin."""

from __future__ import annotations

import pytest

from base.models import AuditEntry
from billing.models import InvoiceDetails, InvoiceRequest, InvoiceStatus, PaymentMethodType, Receipt
from tests.support.money_html import money
from tests.support.statements import at, seed_march, top_up

pytestmark = pytest.mark.django_db
GOOD_ID, BAD_ID = "91350100M000100Y43", "91350100M000100Y44"


def make_receipt(user, intent="pi_receipt_1", method=PaymentMethodType.WECHAT_PAY) -> Receipt:
    payment = top_up(user, "50", "2026-03-05 12:00", intent)
    return Receipt.objects.create(
        payment=payment,
        user=user,
        amount=payment.amount,
        currency="CNY",
        method=method,
        payment_intent_id=intent,
        balance_after=62_340_000,
        credited_at=at("2026-03-05 12:00"),
    )


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


@pytest.fixture
def details(alice):
    return InvoiceDetails.objects.create(
        user=alice, company_name="Xinghe Tech Ltd", taxpayer_id=GOOD_ID, address="1 Gulou Road, Fuzhou"
    )


# -- receipts --------------------------------------------------------------------------------------


def test_the_receipt_page_shows_amount_method_id_time_and_balance_after(client, alice):
    receipt = make_receipt(alice)
    client.force_login(alice)
    page = client.get(f"/billing/receipts/{receipt.pk}/").content.decode()
    assert f'data-testid="receipt-amount">{money("¥50.00")}<' in page
    assert 'data-testid="receipt-method">WeChat Pay<' in page
    assert ">pi_receipt_1<" in page
    assert "2026-03-05 20:00 UTC+8" in page  # Asia/Shanghai, with its offset
    assert f'data-testid="receipt-balance-after">{money("¥62.34")}<' in page
    assert "data-print" in page


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_someone_elses_receipt_is_a_404(client, alice, bob, language):
    receipt = make_receipt(alice)
    client.force_login(bob)
    assert client.get(f"/billing/receipts/{receipt.pk}/", HTTP_ACCEPT_LANGUAGE=language).status_code == 404
    assert client.get("/billing/receipts/999999/").status_code == 404


def test_the_receipt_page_needs_a_sign_in(client, alice):
    receipt = make_receipt(alice)
    assert client.get(f"/billing/receipts/{receipt.pk}/").status_code == 302


def test_the_billing_page_links_each_receipt(client, alice, bob):
    mine, theirs = make_receipt(alice, "pi_a"), make_receipt(bob, "pi_b")
    client.force_login(alice)
    page = client.get("/billing/").content.decode()
    assert f'href="/billing/receipts/{mine.pk}/"' in page
    assert f'href="/billing/receipts/{theirs.pk}/"' not in page
    assert 'href="/billing/invoice-details/"' in page


def test_the_receipt_page_in_chinese(client, alice):
    receipt = make_receipt(alice, method=PaymentMethodType.ALIPAY)
    client.force_login(alice)
    page = client.get(f"/billing/receipts/{receipt.pk}/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "收据" in page and "支付宝" in page and "充值后余额" in page and "2026年3月5日 20:00 UTC+8" in page


# -- invoice details -------------------------------------------------------------------------------


def test_invoice_details_are_saved_with_the_taxpayer_id_normalized(client, alice):
    client.force_login(alice)
    answer = client.post(
        "/billing/invoice-details/",
        {"company_name": "Xinghe Tech Ltd", "taxpayer_id": " 9135 0100 m000 100y 43", "address": "1 Gulou Road"},
    )
    assert answer.status_code == 302
    assert InvoiceDetails.objects.get(user=alice).taxpayer_id == GOOD_ID
    assert "Invoice details saved." in client.get(answer["Location"]).content.decode()


@pytest.mark.parametrize(
    ("language", "message"),
    [
        ("en", "The taxpayer id (unified social credit code) is not valid: its check digit should be 3."),
        ("zh-CN", "统一社会信用代码无效：校验位应为 3。"),
    ],
)
def test_a_bad_taxpayer_id_is_refused_by_name(client, alice, language, message):
    client.force_login(alice)
    answer = client.post(
        "/billing/invoice-details/",
        {"company_name": "Xinghe", "taxpayer_id": BAD_ID, "address": "1 Gulou Road"},
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert answer.status_code == 400
    assert message in answer.content.decode()
    assert not InvoiceDetails.objects.exists()


def test_a_too_long_taxpayer_id_is_refused_by_name_not_by_length_alone(client, alice):
    client.force_login(alice)
    answer = client.post(
        "/billing/invoice-details/", {"company_name": "X", "taxpayer_id": GOOD_ID + "9", "address": "Y"}
    )
    page = answer.content.decode()
    assert answer.status_code == 400
    assert "The taxpayer id (unified social credit code) must be 18 characters; this one has 19." in page
    assert "Ensure this value" not in page


def test_the_details_form_returns_to_the_statement_it_came_from(client, alice):
    client.force_login(alice)
    answer = client.post(
        "/billing/invoice-details/",
        {"company_name": "X", "taxpayer_id": GOOD_ID, "address": "Y", "next": "/billing/statements/2026-03/"},
    )
    assert answer["Location"] == "/billing/statements/2026-03/"
    evil = client.post(
        "/billing/invoice-details/",
        {"company_name": "X", "taxpayer_id": GOOD_ID, "address": "Y", "next": "https://evil.example/"},
    )
    assert evil["Location"] == "/billing/invoice-details/"


# -- requesting from the statement ------------------------------------------------------------------


def test_the_statement_asks_for_details_before_a_request(march, client, alice):
    client.force_login(alice)
    page = client.get("/billing/statements/2026-03/").content.decode()
    assert "add your invoice details</a> first" in page
    assert 'data-testid="invoice-request"' not in page


def test_requesting_an_invoice_from_the_statement(march, details, client, alice):
    client.force_login(alice)
    page = client.get("/billing/statements/2026-03/").content.decode()
    assert f"You paid {money('¥40.00')} this month." in page
    assert 'data-testid="invoice-request"' in page

    answer = client.post("/billing/statements/2026-03/invoice/")
    assert answer["Location"] == "/billing/statements/2026-03/"
    made = InvoiceRequest.objects.get(user=alice, month="2026-03")
    assert made.amount == 40_000_000
    page = client.get(answer["Location"]).content.decode()
    assert "Invoice requested for 2026-03." in page
    assert "Invoice requested: the operator will issue it" in page
    assert 'data-testid="invoice-request"' not in page

    again = client.post("/billing/statements/2026-03/invoice/", follow=True).content.decode()
    assert "An invoice for 2026-03 has already been requested." in again
    assert InvoiceRequest.objects.count() == 1


def test_a_request_without_details_is_refused_with_a_message(march, client, alice):
    client.force_login(alice)
    page = client.post("/billing/statements/2026-03/invoice/", follow=True).content.decode()
    assert "Add your invoice details (company name, taxpayer id, address) first." in page
    assert not InvoiceRequest.objects.exists()


def test_a_month_with_nothing_to_invoice_offers_no_button(march, details, client, alice):
    client.force_login(alice)
    page = client.get("/billing/statements/2026-04/").content.decode()
    assert "Nothing was paid this month, so there is nothing to invoice." in page
    refused = client.post("/billing/statements/2026-04/invoice/", follow=True).content.decode()
    assert "Nothing was paid in 2026-04, so there is nothing to invoice." in refused


def test_the_current_month_cannot_be_requested_yet(details, client, alice):
    client.force_login(alice)
    page = client.get("/billing/statements/2999-01/").content.decode()
    assert "can be requested once the month is over" in page


def test_requesting_is_a_post(march, details, client, alice):
    client.force_login(alice)
    assert client.get("/billing/statements/2026-03/invoice/").status_code == 405


def test_the_statement_shows_the_issued_number_in_both_languages(march, details, client, alice, operator):
    client.force_login(alice)
    client.post("/billing/statements/2026-03/invoice/")
    InvoiceRequest.objects.filter(user=alice).update(
        status=InvoiceStatus.ISSUED,
        invoice_number="24110000000012345678",
        issued_at=at("2026-04-02 03:00"),
        issued_by=operator,
    )
    english = client.get("/billing/statements/2026-03/").content.decode()
    assert 'data-testid="invoice-number">24110000000012345678<' in english
    assert "Invoice issued: number" in english
    chinese = client.get("/billing/statements/2026-03/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "发票已开具，发票号码：" in chinese and "24110000000012345678" in chinese


# -- the admin -------------------------------------------------------------------------------------


def test_the_operator_marks_a_request_issued_with_its_number(march, details, client, alice, operator):
    client.force_login(alice)
    client.post("/billing/statements/2026-03/invoice/")
    made = InvoiceRequest.objects.get(user=alice)
    client.force_login(operator)

    listing = client.get("/admin/billing/invoicerequest/", {"status__exact": "requested", "q": GOOD_ID})
    assert listing.status_code == 200 and "Xinghe Tech Ltd" in listing.content.decode()
    assert money("¥40.00") in listing.content.decode()

    url = f"/admin/billing/invoicerequest/{made.pk}/change/"
    missing = client.post(url, {"invoice_number": ""})
    assert missing.status_code == 200
    assert "Enter the invoice number to mark the request issued." in missing.content.decode()
    made.refresh_from_db()
    assert made.status == InvoiceStatus.REQUESTED

    done = client.post(url, {"invoice_number": "24110000000012345678"})
    assert done.status_code == 302
    made.refresh_from_db()
    assert (made.status, made.invoice_number) == (InvoiceStatus.ISSUED, "24110000000012345678")
    assert made.issued_by == operator
    assert made.issued_at is not None
    assert AuditEntry.objects.filter(action="invoice.issue", target_id=str(made.pk), actor=operator).count() == 1
    issued_page = client.get(url).content.decode()
    assert "24110000000012345678" in issued_page and "UTC+8" in issued_page

    client.force_login(alice)
    assert "24110000000012345678" in client.get("/billing/statements/2026-03/").content.decode()


def test_the_admin_reads_chinese(march, details, client, alice, operator):
    client.force_login(alice)
    client.post("/billing/statements/2026-03/invoice/")
    client.force_login(operator)
    page = client.get("/admin/billing/invoicerequest/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "发票申请" in page and "统一社会信用代码" in page and "已申请" in page
