"""The site's own pages in Simplified Chinese (#33): home, pricing, the dashboard, API tokens, the preferences page,
sign-up and sign-in, the bids page, the 404 page and the operator's credit page: no visible English left.

Plus the preferences page itself: the language and time zone are saved, a bad zone is refused by name on its
field, and the pages' times then follow the chosen zone.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from base.models import Preferences
from billing.models import SpotPrice
from fleet.choices import AgentStatus, JobStatus
from fleet.models import ChipType, Job, Node
from market.models import Bid, BidStatus
from portal.models.tokens import ApiToken
from tests.portal.i18n.visible_text import untranslated
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}
# The test's own names, and chip names as the catalog spells them (NVIDIA RTX 4090, Google TPU v5e, ...).
NAMES = ("alice", "carol", "laptop", "ci-bot", "test funds", "llama-tiny", "mixed run")
NAMES += ("NVIDIA", "Google", "Huawei", "Cambricon")
UNITS = ("MLU370-X8", "GB/s")


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    """No background work behind a bid; allauth's mail cooldown starts from nothing."""
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def market(catalog):
    """Every seeded node online, and clearing prices on the RTX 4090 so the pricing page shows one."""
    Node.objects.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    rtx = ChipType.objects.get(slug="rtx-4090")
    SpotPrice.objects.create(
        chip_type=rtx,
        at=timezone.now() - timedelta(minutes=1),
        price_per_hour=900_000,
        floor_per_hour=500_000,
        capacity=8,
        demand=4,
        allocated=4,
    )


@pytest.fixture
def alice_client(client, alice, fund):
    fund(alice)
    client.force_login(alice)
    return client


def spot_job(owner, status=JobStatus.RUNNING, **fields) -> Job:
    spec = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 100,
        "max_budget_per_hour": 28_000_000,
        "spot": True,
        "spot_bid_per_hour": 900_000,
    }
    return Job.objects.create(owner=owner, status=status, **{**spec, **fields})


def bid(owner, job, chip="rtx-4090", **fields) -> Bid:
    values = {"chips": 2, "max_price_per_hour": 1_000_000, "placed_at": timezone.now(), **fields}
    return Bid.objects.create(owner=owner, job=job, chip_type=ChipType.objects.get(slug=chip), **values)


def chinese(client, url, **extra) -> str:
    response = client.get(url, **ZH, **extra)
    assert response.status_code in (200, 404), (url, response.status_code)
    html = response.content.decode()
    assert re.search(r'<html lang="zh-hans"[ >]', html)
    return html


def english_left(html: str, *names: str) -> list[str]:
    return untranslated(html, also_allowed=(*NAMES, *UNITS, *names))


# Public pages


def test_the_home_page_is_chinese(client, market, settings):
    html = chinese(client, reverse("home"))
    assert "个芯片在线" in html and "体验金" in html
    assert english_left(html) == []


def test_the_pricing_page_is_chinese(client, market):
    html = chinese(client, reverse("pricing"))
    assert "成交价" in html and "按秒计费" in html
    assert english_left(html) == []


def test_the_404_page_is_chinese(client):
    html = chinese(client, "/no/such/page/")
    assert "页面未找到" in html
    assert english_left(html) == []


@pytest.mark.parametrize(
    "page",
    [
        "account_login",
        "account_signup",
        "account_reset_password",
        "account_reset_password_done",
        "account_email_verification_sent",
    ],
)
def test_the_sign_in_pages_are_chinese(client, page):
    assert english_left(chinese(client, reverse(page))) == []


def test_the_sign_up_pages_are_chinese_through_to_the_confirmation(client, mailoutbox):
    data = {"username": "carol", "email": "carol@example.com", "password1": PASSWORD, "password2": PASSWORD}
    sent = client.post(reverse("account_signup"), data, **ZH)
    assert sent.status_code == 302
    html = chinese(client, sent["Location"])
    assert "体验金" in html and "重新发送链接" in html
    assert english_left(html, "carol@example.com") == []
    mail = mailoutbox[0].body
    assert "确认地址即可开始使用" in mail and "signed up for" not in mail


def test_a_refused_sign_in_is_chinese(client, alice):
    html = client.post(reverse("account_login"), {"login": "alice", "password": "wrong"}, **ZH).content.decode()
    assert "field-invalid" in html or "errorlist" in html
    assert english_left(html) == []


def test_a_refused_sign_up_is_chinese(client, alice):
    data = {"username": "carol", "email": "carol@example.com", "password1": "short", "password2": "other"}
    html = client.post(reverse("account_signup"), data, **ZH).content.decode()
    assert english_left(html) == []


# Signed-in pages


def test_the_dashboard_is_chinese(alice_client, alice):
    Job.objects.create(
        owner=alice,
        name="mixed run",
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=28_000_000,
        status=JobStatus.STOPPED_NO_CREDIT,
        status_reason="余额不足。",
        finished_at=timezone.now(),
    )
    html = chinese(alice_client, reverse("dashboard"))
    assert 'data-testid="credit-stop"' in html and "语言和时区" in html
    assert english_left(html) == []


def test_the_first_run_dashboard_is_chinese(alice_client):
    html = chinese(alice_client, reverse("dashboard"))
    assert "训练您的第一个模型" in html
    assert english_left(html) == []


def test_the_tokens_page_is_chinese_with_a_new_token_and_every_status(alice_client, alice):
    old, _ = ApiToken.issue(alice, name="ci-bot")
    old.revoke()
    used, _ = ApiToken.issue(alice, name="laptop", expires_at=timezone.now() + timedelta(days=3))
    ApiToken.objects.filter(pk=used.pk).update(last_used_at=timezone.now())
    html = alice_client.post(reverse("tokens"), {"name": "laptop", "scope": "read_only"}, **ZH).content.decode()
    assert "请立即复制" in html and "已撤销" in html and "有效" in html
    assert english_left(html) == []


def test_a_refused_token_is_chinese(alice_client):
    html = alice_client.post(reverse("tokens"), {"name": "", "expires_in_days": "soon"}, **ZH).content.decode()
    assert "名称：" in html
    assert english_left(html) == []


def test_the_preferences_page_is_chinese(alice_client):
    html = chinese(alice_client, reverse("preferences"))
    assert english_left(html) == []


def test_the_bids_page_is_chinese_with_active_and_past_bids(alice_client, alice, catalog):
    job = spot_job(alice, name="mixed run")
    bid(alice, job, won_chips=1, clearing_price=700_000)
    bid(alice, spot_job(alice), chip="tpu-v5e", status=BidStatus.CANCELLED)
    html = chinese(alice_client, reverse("bids"))
    assert "您的竞价" in html and "已取消" in html
    assert english_left(html) == []


def test_a_refused_bid_is_chinese(alice_client, alice, catalog):
    job = spot_job(alice)
    data = {"job": job.pk, "chip": "rtx-4090", "chips": "0", "max_price": ""}
    html = alice_client.post(reverse("bids"), data, **ZH).content.decode()
    assert "field-error" in html
    assert english_left(html) == []


def test_the_operators_credit_page_is_chinese_where_our_template_writes(client, operator, alice):
    """The breadcrumbs, the balance line and the button (the admin's menus and the form are the admin's own)."""
    client.force_login(operator)
    html = chinese(client, reverse("admin:portal_adjust_credit", args=[alice.pk]))
    start = html.index('<div class="breadcrumbs">')
    crumbs = html[start : html.index("</div>", start)]
    balance = html[html.index("<p>", html.index('id="content"')) : html.index("</p>", html.index("admin-balance"))]
    button = re.search(r'<input type="submit"[^>]*>', html)[0]
    assert "调整额度" in crumbs and "当前余额" in balance and 'value="提交调整"' in button
    assert english_left(crumbs + balance + button) == []


def test_the_page_scripts_strings_are_in_the_javascript_catalog(client):
    catalog = client.get(reverse("javascript-catalog"), **ZH).content.decode()
    assert json.dumps("已复制") in catalog and json.dumps("预计不间断小时数") in catalog


# English stays as it was


def test_in_english_the_pages_are_unchanged(client, market):
    home = client.get(reverse("home")).content.decode()
    assert "Train on every chip at once." in home and re.search(r"\d+ chips online", home)
    pricing = client.get(reverse("pricing")).content.decode()
    assert "Per chip-hour, billed per second." in pricing and "Chips online" in pricing
    assert "个芯片" not in home + pricing


def test_in_english_the_dashboard_links_to_the_preferences(alice_client):
    html = alice_client.get(reverse("dashboard")).content.decode()
    assert ">Language and time zone</a>" in html and f'href="{reverse("preferences")}"' in html
    assert f'<a class="nav-user" href="{reverse("preferences")}"' in html


# The preferences page


def test_the_preferences_are_saved(alice_client, alice):
    response = alice_client.post(reverse("preferences"), {"language": "zh-hans", "time_zone": "Europe/Berlin"})
    assert response.status_code == 302 and response["Location"] == reverse("preferences")
    saved = Preferences.objects.get(user=alice)
    assert (saved.language, saved.time_zone) == ("zh-hans", "Europe/Berlin")
    page = alice_client.get(reverse("preferences"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in page and "已保存" in page
    assert 'value="Europe/Berlin"' in page


def test_an_empty_language_follows_the_browser(alice_client, alice):
    Preferences.objects.create(user=alice, language="zh-hans")
    alice_client.post(reverse("preferences"), {"language": "", "time_zone": "Asia/Shanghai"})
    assert Preferences.objects.get(user=alice).language == ""
    assert '<html lang="en">' in alice_client.get(reverse("dashboard")).content.decode()
    assert '<html lang="zh-hans">' in alice_client.get(reverse("dashboard"), **ZH).content.decode()


def test_a_bad_time_zone_is_refused_by_name_on_its_field(alice_client, alice):
    response = alice_client.post(reverse("preferences"), {"language": "en", "time_zone": "Mars/Olympus"})
    html = response.content.decode()
    assert response.status_code == 200
    errors = re.findall(r'class="field-error" id="id_time_zone_error">([^<]+)<', html)
    assert errors == ["Time zone: “Mars/Olympus” is not a time zone (try Asia/Shanghai or Europe/Berlin)."]
    assert not Preferences.objects.filter(user=alice).exists()
    zh = alice_client.post(reverse("preferences"), {"language": "", "time_zone": "Mars/Olympus"}, **ZH)
    assert "时区：“Mars/Olympus”不是有效的时区" in zh.content.decode()


def test_the_preferences_page_shows_the_time_now_in_the_saved_zone(alice_client, alice):
    assert "Asia/Shanghai" in alice_client.get(reverse("preferences")).content.decode()
    alice_client.post(reverse("preferences"), {"language": "", "time_zone": "America/New_York"})
    now = alice_client.get(reverse("preferences")).content.decode()
    zone_now = now[now.index('data-testid="zone-now"') :]
    assert re.search(r"UTC−[45]</time> in <strong>America/New_York</strong>", zone_now)


def test_the_pages_times_follow_the_chosen_zone(alice_client, alice):
    token, _ = ApiToken.issue(alice, name="laptop")
    ApiToken.objects.filter(pk=token.pk).update(created_at=datetime(2026, 1, 15, 23, 30, tzinfo=UTC))

    def created_cell() -> str:
        html = alice_client.get(reverse("tokens")).content.decode()
        row = html[html.index('data-testid="token-row"') :]
        return re.search(r"<time [^>]*>([^<]+)</time>", row)[1]

    assert created_cell() == "2026-01-16 UTC+8"  # Asia/Shanghai by default
    alice_client.post(reverse("preferences"), {"language": "", "time_zone": "America/New_York"})
    assert created_cell() == "2026-01-15 UTC−5"
    alice_client.post(reverse("preferences"), {"language": "zh-hans", "time_zone": "America/New_York"})
    assert created_cell() == "2026年1月15日 UTC−5"


def test_the_spot_chart_is_told_the_persons_zone(alice_client, alice, catalog):
    Preferences.objects.create(user=alice, time_zone="Europe/Berlin")
    html = alice_client.get(reverse("pricing")).content.decode()
    assert 'data-time-zone="Europe/Berlin"' in html
    visitor = type(alice_client)()
    assert 'data-time-zone="Asia/Shanghai"' in visitor.get(reverse("pricing")).content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("tasks_run_inline")
def test_the_question_before_a_cancel_moves_a_running_job_is_chinese(client, enroll, fund, alice):
    """The job runs on the one spot RTX 4090 (placed by the scheduler), with an on-demand TPU v5e to move to."""
    from tests.workers.services.test_spot_migration import spot_job as running_spot_job

    fund(alice, "100")
    enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    enroll("tpu-1", "tpu-v5e", chips=1)
    job = running_spot_job(alice, "1.00", allow_on_demand=True)
    client.force_login(alice)
    asked = client.post(reverse("bid_cancel", args=[Bid.objects.get(job=job).pk]), **ZH)
    html = asked.content.decode()
    assert 'data-testid="bid-confirm"' in html and "取消竞价并迁移训练任务" in html
    message = re.search(r'data-testid="bid-confirm-message">([^<]+)<', html)[1]
    assert message.startswith("取消竞价") and "保存检查点后重新规划" in message
    assert english_left(html) == []
