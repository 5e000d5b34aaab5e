"""The operator console (Django's admin) in zh-hans (#33): our models' names, columns, filters and actions are
Chinese, times carry their zone; in English the console reads as before."""

from __future__ import annotations

import re

import pytest

from base.audit import record
from fleet.choices import JobStatus
from fleet.models import ChipType, Job, Node, Pool
from market.models import Bid
from portal.models import ApiToken
from tests.portal.i18n.visible_text import untranslated
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
)


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def data(alice, operator, fund, enroll):
    """A node in a pool, a running job with a bid, an API token, an enrollment token and an audit entry."""
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
    return {"job": job, "bid": bid, "node": node, "token": token}


def allowed(data) -> tuple[str, ...]:
    """The data's names as the pages show them: pools, chip types, token prefixes, audit codes."""
    names = [*DATA, data["token"].prefix, "node.drain", "fleet.node"]
    names += [pool.name for pool in Pool.objects.all()] + [pool.zone for pool in Pool.objects.all()]
    names += [f"{chip.name}" for chip in ChipType.objects.all()] + [chip.slug for chip in ChipType.objects.all()]
    names += [str(token) for token in EnrollmentToken.objects.all()]
    names += [token.prefix for token in EnrollmentToken.objects.all()]
    names += [str(data["node"]), str(data["job"]), str(data["bid"])]
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
]


def our_part(html: str) -> str:
    """The page without the index's and sidebar's sections of the billing app, whose names its own helper keeps."""
    return re.sub(r'<div class="app-billing module.*?</div>', "", html, flags=re.S)


@pytest.mark.parametrize("url", CHANGELISTS)
def test_each_changelist_of_ours_reads_in_chinese(console, data, url):
    response = console.get(url, **ZH)
    assert response.status_code == 200
    html = response.content.decode()
    left = untranslated(our_part(html), also_allowed=allowed(data))
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
    ):
        assert name in html, name
    assert untranslated(our_part(html), also_allowed=allowed(data)) == []


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
    ]


def test_each_change_page_reads_in_chinese_with_its_times_zoned(console, data):
    english = {}
    for url in change_pages(data):
        response = console.get(url, follow=True, **ZH)
        assert response.status_code == 200, url
        html = response.content.decode()
        left = untranslated(our_part(html), also_allowed=(*allowed(data), "synthetic"))
        if left:
            english[url] = left
    assert english == {}
    job = console.get(change_pages(data)[0], **ZH).content.decode()
    assert "UTC+8" in job  # a read-only time (and the allocations inline's) with its offset
    token = console.get(change_pages(data)[3], **ZH).content.decode()
    assert "时间（Asia/Shanghai，UTC+8）" in token  # an editable time says which zone it is read in
