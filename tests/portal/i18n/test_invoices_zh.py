"""Receipts and invoices in Simplified Chinese: every visible text of their pages and page parts is Chinese."""

from __future__ import annotations

import re

import pytest

from billing.models import InvoiceDetails, InvoiceRequest, InvoiceStatus, PaymentMethodType, Receipt
from tests.portal.i18n.visible_text import untranslated
from tests.support.statements import at, seed_march, top_up

pytestmark = pytest.mark.django_db
ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
NAMES = ("alice", "Starverse", "Stripe", "pi_zh_1", "Xinghe Tech Ltd", "91350100M000100Y43", "24110000000012345678")


def section(html: str, element_id: str) -> str:
    """One part of a page (this feature's own), as the checker should read it."""
    match = re.search(rf'<section[^>]*id="{element_id}".*?</section>', html, re.S)
    assert match, f"no section {element_id}"
    return match[0]


def main(html: str) -> str:
    match = re.search(r"<main.*?</main>", html, re.S)
    return match[0] if match else html


@pytest.fixture
def receipt(alice) -> Receipt:
    payment = top_up(alice, "50", "2026-03-05 12:00", "pi_zh_1")
    return Receipt.objects.create(
        payment=payment,
        user=alice,
        amount=payment.amount,
        currency="CNY",
        method=PaymentMethodType.WECHAT_PAY,
        payment_intent_id="pi_zh_1",
        balance_after=62_340_000,
        credited_at=at("2026-03-05 12:00"),
    )


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


def details_for(user) -> InvoiceDetails:
    return InvoiceDetails.objects.create(
        user=user, company_name="Xinghe Tech Ltd", taxpayer_id="91350100M000100Y43", address="福州市鼓楼区"
    )


def test_the_receipt_page(client, alice, receipt):
    client.force_login(alice)
    html = client.get(f"/billing/receipts/{receipt.pk}/", **ZH).content.decode()
    assert "微信支付" in html and "打印" in html
    assert untranslated(main(html), also_allowed=NAMES) == []


def test_the_receipt_page_in_english_is_unchanged(client, alice, receipt):
    client.force_login(alice)
    html = client.get(f"/billing/receipts/{receipt.pk}/").content.decode()
    assert f"Receipt {receipt.pk}" in html and "Balance after" in html and "WeChat Pay" in html


def test_the_receipts_on_the_billing_page(client, alice, receipt):
    client.force_login(alice)
    html = client.get("/billing/", **ZH).content.decode()
    assert untranslated(section(html, "receipts"), also_allowed=NAMES) == []


def test_no_receipts_yet_on_the_billing_page(client, alice):
    client.force_login(alice)
    html = client.get("/billing/", **ZH).content.decode()
    assert "暂无收据" in html
    assert untranslated(section(html, "receipts"), also_allowed=NAMES) == []


def test_the_invoice_details_page_empty_and_with_an_error(client, alice):
    client.force_login(alice)
    html = client.get("/billing/invoice-details/", **ZH).content.decode()
    assert untranslated(main(html), also_allowed=NAMES) == []
    refused = client.post(
        "/billing/invoice-details/",
        {"company_name": "Xinghe Tech Ltd", "taxpayer_id": "91350100M000100Y44", "address": ""},
        **ZH,
    ).content.decode()
    assert "统一社会信用代码无效：校验位应为 3。" in refused
    assert untranslated(main(refused), also_allowed=(*NAMES, "91350100M000100Y44")) == []


@pytest.mark.parametrize("state", ["no_details", "ready", "requested", "issued", "nothing", "open"])
def test_the_invoice_part_of_the_statement(march, client, alice, operator, state):
    month = {"nothing": "2026-04", "open": "2999-01"}.get(state, "2026-03")
    if state != "no_details":
        details_for(alice)
    client.force_login(alice)
    if state in ("requested", "issued"):
        client.post(f"/billing/statements/{month}/invoice/")
    if state == "issued":
        InvoiceRequest.objects.filter(user=alice).update(
            status=InvoiceStatus.ISSUED,
            invoice_number="24110000000012345678",
            issued_at=at("2026-04-02 03:00"),
            issued_by=operator,
        )
    html = client.get(f"/billing/statements/{month}/", **ZH).content.decode()
    assert untranslated(section(html, "invoice"), also_allowed=NAMES) == []


def test_the_invoice_part_of_the_statement_in_english(march, client, alice):
    details_for(alice)
    client.force_login(alice)
    html = client.get("/billing/statements/2026-03/").content.decode()
    assert "Request an invoice" in section(html, "invoice")


def test_the_admins_invoice_requests_in_chinese(march, client, alice, operator):
    details_for(alice)
    client.force_login(alice)
    client.post("/billing/statements/2026-03/invoice/")
    made = InvoiceRequest.objects.get(user=alice)
    client.force_login(operator)
    allowed = (*NAMES, "op", "Django", "2026-03", "alice@example.com")
    for url in ("/admin/billing/invoicerequest/", f"/admin/billing/invoicerequest/{made.pk}/change/"):
        html = client.get(url, **ZH).content.decode()
        content = re.search(r'<div id="content".*', html, re.S)[0]
        assert untranslated(content, also_allowed=allowed) == [], url
