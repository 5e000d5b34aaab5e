"""The operator console (Django's admin) in zh-hans (#33): our models' names, columns, filters and actions are
Chinese, times carry their zone, money shows in yuan; in English the console reads as before."""

from __future__ import annotations

import pytest

from base.audit import record
from billing.models import Account, OperatorSettings, Price, StripeEvent, Transaction
from fleet.choices import JobStatus
from fleet.models import ChipType, Job, Node, Pool
from market.models import Bid
from portal.models import ApiToken
from tests.portal.i18n.visible_text import untranslated
from tests.support.statements import refund, top_up
from workers.models import EnrollmentToken

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
# What Django and allauth write in English whatever the language: a boolean column's icon's alt text, and
# allauth's two-factor model, whose name is not marked for translation (the sidebar lists it).
DJANGO_OWN = ("True", "False", "Authenticators")
# The data's own names (users, hosts, pools, chips, models, token names and prefixes) and the admin's
# own pieces that are not prose: the audit actions' codes, the users' e-mail addresses.
DATA = (
    "alice",
    "op",
    "alice@example.com",
    "op@example.com",
    "llama-tiny",
    "i18n-4090",
    "laptop",
    "join-rack-1",
    "enrollment token",
    # The billing data's own words: Stripe's ids and event type, and the ledger's memos (stored English).
    "pi_i18n_1",
    "re_",
    "evt_i18n_1",
    "payment_intent.succeeded",
    "Top-up pi_i18n_1",
    "Refund of pi_i18n_1",
    "test",
    "CNY",
)


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def data(alice, operator, fund, enroll):
    """A node in a pool, a running job with a bid, an API token, an enrollment token and an audit entry; a
    price, a card payment with a refund, a Stripe event and the operator settings."""
    fund(alice)
    node, _ = enroll("i18n-4090", "rtx-4090", spot=True)
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        spot=True, spot_bid_per_hour=900_000, status=JobStatus.RUNNING,
    )  # fmt: skip
    bid = Bid.objects.create(
        owner=alice, job=job, chip_type=ChipType.objects.get(slug="rtx-4090"), chips=1,
        max_price_per_hour=900_000, placed_at=job.created_at,
    )  # fmt: skip
    token, _ = ApiToken.issue(alice)
    token.name = "laptop"
    token.save()
    EnrollmentToken.issue(node.pool, chips=1, max_uses=1, name="join-rack-1", created_by=operator)
    record(operator, "node.drain", node)
    price = Price.objects.create(
        chip_type=ChipType.objects.get(slug="rtx-4090"), on_demand_per_hour=1_350_000, spot_floor_per_hour=550_000
    )
    payment = top_up(alice, "50.00", "2026-03-05 12:00", "pi_i18n_1")
    refunded = refund(payment, "10.00", "2026-03-06 12:00", actor=operator)
    StripeEvent.objects.create(id="evt_i18n_1", type="payment_intent.succeeded", payload={})
    OperatorSettings.load()
    return {
        "job": job, "bid": bid, "node": node, "token": token,
        "price": price, "payment": payment, "refund": refunded,
    }  # fmt: skip


def allowed(data) -> tuple[str, ...]:
    """The data's names as the pages show them: pools, chip types, token prefixes, audit codes."""
    names = [*DATA, data["token"].prefix, "node.drain", "fleet.node"]
    names += [pool.name for pool in Pool.objects.all()] + [pool.zone for pool in Pool.objects.all()]
    names += [f"{chip.name}" for chip in ChipType.objects.all()] + [chip.slug for chip in ChipType.objects.all()]
    names += [str(token) for token in EnrollmentToken.objects.all()]
    names += [token.prefix for token in EnrollmentToken.objects.all()]
    names += [str(data["node"]), str(data["job"]), str(data["bid"])]
    # Rows named by their English __str__ (the audit log stores it): ledger transactions, accounts, payments.
    names += [str(data["payment"]), str(data["refund"]), str(data["price"])]
    names += [str(txn) for txn in Transaction.objects.all()] + [str(account) for account in Account.objects.all()]
    for field in ("memo", "idempotency_key", "fingerprint"):
        names += [value for value in Transaction.objects.values_list(field, flat=True) if value]
    names += [note for note in Price.objects.values_list("note", flat=True) if note]
    names += list(Node.objects.values_list("hostname", flat=True)) + list(
        ChipType.objects.values_list("vendor", flat=True)
    )
    return (*names, *DJANGO_OWN)


CHANGELISTS = [
    "/admin/fleet/job/",
    "/admin/fleet/chiptype/",
    "/admin/fleet/pool/",
    "/admin/fleet/node/",
    "/admin/workers/enrollmenttoken/",
    "/admin/market/bid/",
    "/admin/market/marketsettings/",
    "/admin/portal/apitoken/",
    "/admin/base/auditentry/",
    "/admin/billing/transaction/",
    "/admin/billing/account/",
    "/admin/billing/price/",
    "/admin/billing/payment/",
    "/admin/billing/refund/",
    "/admin/billing/stripeevent/",
    "/admin/billing/operatorsettings/",
    "/admin/billing/receipt/",
    "/admin/billing/invoicedetails/",
    "/admin/billing/invoicerequest/",
    "/admin/billing/spotprice/",
]


@pytest.mark.parametrize("url", CHANGELISTS)
def test_each_changelist_of_ours_reads_in_chinese(console, data, url):
    response = console.get(url, **ZH)
    assert response.status_code == 200
    html = response.content.decode()
    left = untranslated(html, also_allowed=allowed(data))
    assert left == [], (url, " | ".join(left))


def test_the_index_names_our_apps_and_models_in_chinese(console, data):
    html = console.get("/admin/", **ZH).content.decode()
    for name in (
        "算力集群",
        "训练任务",
        "芯片类型",
        "资源池",
        "节点",
        "节点注册",
        "注册令牌",
        "Spot 市场",
        "出价",
        "API 令牌",
        "审计日志",
        "账务",
        "账目交易",
        "账户",
        "价格",
        "付款",
        "退款",
        "Stripe 事件",
        "运营设置",
        "账务报表",
    ):
        assert name in html, name
    assert untranslated(html, also_allowed=allowed(data)) == []


def test_columns_and_actions_are_chinese_and_times_carry_their_zone(console, data):
    html = console.get("/admin/fleet/node/", **ZH).content.decode()
    for column in ("主机名", "资源池", "芯片数", "代理状态", "最后心跳时间", "可用于 Spot"):
        assert column in html, column
    for action in ("回收维护", "排空", "让已排空的节点恢复服务", "重置节点"):
        assert action in html, action
    jobs = console.get("/admin/fleet/job/", **ZH).content.decode()
    assert "创建时间" in jobs and "UTC+8" in jobs  # the operator's zone (Asia/Shanghai), with its offset
    bids = console.get("/admin/market/bid/", **ZH).content.decode()
    assert "最高价 / 芯片·小时" in bids and "¥0.90" in bids


def test_an_action_message_is_chinese(console, data):
    response = console.post(
        "/admin/portal/apitoken/",
        {"action": "revoke_selected", "_selected_action": [data["token"].pk]},
        follow=True,
        **ZH,
    )
    assert "已吊销" in response.content.decode()


def test_the_console_reads_as_before_in_english(console, data):
    html = console.get("/admin/fleet/node/").content.decode()
    for text in (
        "Starverse operator console",
        "Compute fleet",
        "Hostname",
        "Agent status",
        "Drain (running jobs finish",
    ):
        assert text in html, text
    assert "UTC+8" in console.get("/admin/fleet/job/").content.decode()


def change_pages(data) -> list[str]:
    return [
        f"/admin/fleet/job/{data['job'].pk}/change/",
        f"/admin/fleet/node/{data['node'].pk}/change/",
        f"/admin/market/bid/{data['bid'].pk}/change/",
        f"/admin/portal/apitoken/{data['token'].pk}/change/",
        f"/admin/workers/enrollmenttoken/{EnrollmentToken.objects.get(name='join-rack-1').pk}/change/",
        "/admin/market/marketsettings/1/change/",
        f"/admin/billing/payment/{data['payment'].pk}/change/",
        f"/admin/billing/refund/{data['refund'].pk}/change/",
        f"/admin/billing/transaction/{data['refund'].transaction_id}/change/",
        f"/admin/billing/account/{Account.objects.get(owner=data['payment'].user).pk}/change/",
        "/admin/billing/operatorsettings/1/change/",
        "/admin/billing/price/add/",
        f"/admin/billing/payment/{data['payment'].pk}/refund/",
    ]


def test_each_change_page_reads_in_chinese_with_its_times_zoned(console, data):
    english = {}
    for url in change_pages(data):
        response = console.get(url, follow=True, **ZH)
        assert response.status_code == 200, url
        html = response.content.decode()
        left = untranslated(html, also_allowed=(*allowed(data), "synthetic"))
        if left:
            english[url] = left
    assert english == {}
    job = console.get(change_pages(data)[0], **ZH).content.decode()
    assert "UTC+8" in job  # a read-only time (and the allocations inline's) with its offset
    token = console.get(change_pages(data)[3], **ZH).content.decode()
    assert "时间（Asia/Shanghai，UTC+8）" in token  # an editable time says which zone it is read in


def test_billings_columns_show_yuan_and_zoned_times_and_its_actions_read_in_chinese(console, data):
    ledger = console.get("/admin/billing/transaction/", **ZH).content.decode()
    assert "金额" in ledger and "¥50.00" in ledger and "创建时间" in ledger and "UTC+8" in ledger
    assert "冲正所选账目交易" in ledger
    prices = console.get("/admin/billing/price/", **ZH).content.decode()
    assert "按需 / 芯片·小时" in prices and "¥1.35" in prices and "¥0.55" in prices and "生效时间" in prices
    payments = console.get("/admin/billing/payment/", **ZH).content.decode()
    assert "¥50.00" in payments and "已成功" in payments and "为所选付款退款" in payments
    refunds = console.get("/admin/billing/refund/", **ZH).content.decode()
    assert "¥10.00" in refunds and "UTC+8" in refunds
    settings_page = console.get("/admin/billing/operatorsettings/", **ZH).content.decode()
    assert "体验金" in settings_page and "充值限额" in settings_page and "¥10.00 至 ¥10000.00" in settings_page
    refund = console.get(f"/admin/billing/payment/{data['payment'].pk}/refund/", **ZH).content.decode()
    assert "退款 pi_i18n_1" in refund


def test_billings_action_messages_are_chinese(console, data):
    reversed_ = console.post(
        "/admin/billing/transaction/",
        {"action": "reverse_selected", "_selected_action": [data["payment"].credited_id]},
        follow=True,
        **ZH,
    ).content.decode()
    assert "已冲正账目交易" in reversed_ and "（充值）" in reversed_
    two = console.post(
        "/admin/billing/payment/",
        {"action": "refund_selected", "_selected_action": []},
        follow=True,
        **ZH,
    )
    assert two.status_code == 200


def test_billing_reads_as_before_in_english(console, data):
    ledger = console.get("/admin/billing/transaction/").content.decode()
    assert "Billing" in ledger and "Ledger transactions" in ledger and "Reverse the selected transactions" in ledger
    settings_page = console.get("/admin/billing/operatorsettings/").content.decode()
    assert "¥10.00 to ¥10000.00" in settings_page and "Top-up limits" in settings_page
