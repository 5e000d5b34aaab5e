"""The money pages in Simplified Chinese: billing (top-up, ledger, charges, e-mail settings), statements and usage,
the operator's billing reports and refund form, deployments (list, deploy form, page, playground), and the
job-ended and low-balance e-mails. Every visible text of their own part of the page is Chinese (the header and
footer are base.html's, checked elsewhere); the English pages are unchanged."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from base.models import Preferences
from billing.models import BillingLine, NotificationSettings
from billing.notifications import send_job_end_email, send_low_balance_email
from fleet.choices import JobStatus
from fleet.models import ChipType, DeploymentStatus, Job
from kernel.money import to_micros
from tests.portal.i18n.visible_text import untranslated
from tests.support.deployment_pages import make_deployment, make_replica
from tests.support.statements import at, charge, make_allocation, seed_march
from workers.models import JobLogLine
from workers.services.deployments import record_request

pytestmark = pytest.mark.django_db
ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
# The test's own names: users, jobs, deployments, hosts, Stripe ids, and stored memos (data, not page text).
NAMES = (
    "alice", "bob", "op", "alpha", "beta", "tiny-chat", "tiny chat run", "pi_alice_1", "job:1", "sim-tpu-v5e-01",
    "transformers", "cpu", "rtx-4090", "a100-80g", "h100-80g", "tpu-v5e", "Google TPU v5e", "NVIDIA RTX 4090",
    "NVIDIA A100 80GB", "Top-up by card (pi_alice_1)", "Refund of top-up pi_alice_1: test refund", "test funds",
    "engine ready on <run>", "PaymentIntent", "bid", "spot", "llama-tiny", "Top-up pi_alice_1", "Refund of pi_alice_1",
    "NVIDIA A100 80G", "test credit", "sim-rtx-4090-01",
)  # fmt: skip
READY = {"state": "ready", "url": "http://127.0.0.1:9/v1", "engine": "transformers", "simulated": True, "device": "cpu"}


def main(html: str) -> str:
    """The page's own part (base.html's header and footer are the site's)."""
    match = re.search(r"<main.*?</main>", html, re.S)
    return match[0] if match else html


def admin_content(html: str) -> str:
    """An admin page's breadcrumbs and content (its sidebar of models and its header are the admin's own)."""
    breadcrumbs = re.search(r'<div class="breadcrumbs">.*?</div>', html, re.S)
    content = re.search(r'<div id="content-main">.*', html, re.S)
    assert breadcrumbs and content
    return breadcrumbs[0] + content[0]


def assert_chinese(html: str, where: str = "") -> None:
    left = untranslated(html, also_allowed=NAMES)
    assert left == [], f"{where} still in English: {left}"


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


@pytest.fixture
def zh_alice(client, alice):
    client.force_login(alice)
    return client


# -- billing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stripe", [True, False], ids=["stripe-configured", "stripe-not-configured"])
def test_the_billing_page(zh_alice, march, settings, stripe):
    if stripe:
        settings.STRIPE_SECRET_KEY, settings.STRIPE_PUBLISHABLE_KEY = "sk_test_x", "pk_test_x"
    else:
        settings.STRIPE_SECRET_KEY = settings.STRIPE_PUBLISHABLE_KEY = ""
    html = zh_alice.get("/billing/", **ZH).content.decode()
    assert "余额" in html and "账目" in html and "银行卡付款" in html
    assert "UTC+8" in html and "(UTC)" not in html
    assert_chinese(main(html))


def test_an_hours_charges_on_their_own_page_and_as_the_opened_row(zh_alice, march):
    hour = at("2026-03-10 11:00")  # the hour the charge was posted in
    url = f"/billing/ledger/{march['alpha'].pk}/{int(hour.timestamp())}/"
    page = zh_alice.get(url, **ZH).content.decode()
    assert "2026年3月10日 19:00–20:00 UTC+8" in re.sub(r"<[^>]+>", "", page)
    assert_chinese(main(page))
    fragment = zh_alice.get(url, HTTP_HX_REQUEST="true", **ZH).content.decode()
    assert "扣费时间" in fragment and "按需" in fragment
    assert_chinese(fragment)


def test_the_email_settings_page_and_its_errors(zh_alice, alice):
    assert_chinese(main(zh_alice.get("/billing/emails/", **ZH).content.decode()))
    answer = zh_alice.post("/billing/emails/", {"low_balance_threshold": "lots"}, **ZH)
    assert answer.status_code == 400
    html = answer.content.decode()
    assert "请输入数字阈值" in html
    assert_chinese(main(html))
    saved = zh_alice.post("/billing/emails/", {"low_balance_threshold": "20", "job_emails": "on"}, follow=True, **ZH)
    assert "已保存：余额低于 ¥20.00 时发送邮件；训练任务邮件已开启。" in saved.content.decode()


# -- statements and usage --------------------------------------------------------------------------


def test_the_statements_statement_and_usage_pages(zh_alice, march):
    for url in (
        "/billing/statements/",
        "/billing/statements/2026-03/",
        "/billing/usage/?since=2026-03-01&until=2026-03-31",
    ):
        html = zh_alice.get(url, **ZH).content.decode()
        assert_chinese(main(html), url)
    statement = zh_alice.get("/billing/statements/2026-03/", **ZH).content.decode()
    assert "期初余额" in statement and "（UTC+8）" in statement and "生成于" in statement


def test_a_bad_statement_or_period_says_so_in_chinese(zh_alice, march):
    bad_month = zh_alice.get("/billing/statements/2026-13/", **ZH)
    assert bad_month.status_code == 400 and "不是有效的月份" in bad_month.content.decode()
    assert_chinese(main(bad_month.content.decode()))
    bad_period = zh_alice.get("/billing/usage/?since=2026-03-31&until=2026-03-01", **ZH)
    assert bad_period.status_code == 400 and "晚于结束日期" in bad_period.content.decode()
    assert_chinese(main(bad_period.content.decode()))


def test_the_operators_billing_reports_and_refund_form(client, operator, march, running_job_of_alice):
    client.force_login(operator)
    for url in (
        "/admin/billing-reports/revenue/?since=2026-03-10&until=2026-03-11",
        "/admin/billing-reports/open/",
        "/admin/billing-reports/payments/",
        f"/admin/billing/payment/{march['payment'].pk}/refund/",
    ):
        answer = client.get(url, **ZH)
        assert answer.status_code == 200, url
        html = answer.content.decode().replace("<td>test</td>", "<td></td>")  # a refund's reason: the operator's words
        assert_chinese(admin_content(html), url)


@pytest.fixture
def running_job_of_alice(alice, march) -> Job:
    job = march["beta"]
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    allocation = make_allocation(job, "rtx-4090", 1, "2026-03-12 10:00")
    charge(allocation, "2026-03-12 10:00", "2026-03-12 10:05", "0.10")
    return job


# -- deployments -----------------------------------------------------------------------------------


@pytest.fixture
def deployment(alice, catalog):
    deployment = make_deployment(alice, name="tiny-chat", status=DeploymentStatus.READY, requests=3)
    replica = make_replica(deployment, READY)
    record_request(
        deployment, route="chat", status_code=200, prompt_tokens=300, completion_tokens=700,
        started_at=timezone.now() - timedelta(minutes=1), first_byte_ms=120.0, duration_ms=900.0,
    )  # fmt: skip
    BillingLine.objects.create(
        job=replica, chip_type=ChipType.objects.get(slug="tpu-v5e"), mode="on_demand",
        billed_through=timezone.now(), charged_total=2_500_000,
    )  # fmt: skip
    JobLogLine.objects.create(job=replica, epoch=1, rank=0, line="engine ready on <run>", created_at=timezone.now())
    return deployment


def test_the_deployment_pages(zh_alice, deployment, seeded_nodes_online):
    for url in (
        "/deployments/",
        "/deployments/new/",
        f"/deployments/{deployment.pk}/",
        f"/deployments/{deployment.pk}/live/",
        f"/deployments/{deployment.pk}/playground/",
    ):
        html = zh_alice.get(url, **ZH).content.decode()
        assert_chinese(main(html), url)
    page = zh_alice.get(f"/deployments/{deployment.pk}/", **ZH).content.decode()
    assert 'data-time-zone="Asia/Shanghai"' in page and "每个副本" not in page or "调度器" in page


def test_a_refused_deploy_form_and_a_stopped_playground(zh_alice, alice, deployment, seeded_nodes_online):
    answer = zh_alice.post("/deployments/new/", {"model": "", "name": "", "min_replicas": "x"}, **ZH)
    assert answer.status_code == 400
    assert_chinese(main(answer.content.decode()))
    deployment.status = DeploymentStatus.STOPPED
    deployment.save(update_fields=["status"])
    html = zh_alice.get(f"/deployments/{deployment.pk}/playground/", **ZH).content.decode()
    assert "“tiny-chat”已停止：不再响应任何请求。" in html
    assert_chinese(main(html))


def test_the_idle_deployment_page_and_scaled_to_zero(zh_alice, alice, catalog):
    idle = make_deployment(alice, name="tiny-chat", status=DeploymentStatus.IDLE, min_replicas=0)
    for url in (f"/deployments/{idle.pk}/", f"/deployments/{idle.pk}/playground/"):
        html = zh_alice.get(url, **ZH).content.decode()
        assert "缩容到零" in html
        assert_chinese(main(html), url)


# -- e-mails ---------------------------------------------------------------------------------------


@pytest.fixture
def chinese_alice(alice):
    Preferences.objects.update_or_create(user=alice, defaults={"language": "zh-hans", "time_zone": "Asia/Shanghai"})
    return alice


def bodies(message) -> tuple[str, str]:
    (html, _kind), *_ = message.alternatives
    return message.body, html


def test_the_low_balance_email_is_in_the_recipients_language(chinese_alice):
    send_low_balance_email(chinese_alice.pk, to_micros("5.20"), to_micros("7"))
    (message,) = mail.outbox
    assert re.search(r"[\u4e00-\u9fff]", message.subject) and "¥7.00" in message.subject
    text, html = bodies(message)
    assert "UTC+8" in text and "UTC+8" in html
    assert_chinese(f"<p>{text}</p>")
    assert_chinese(html)


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.STOPPED_NO_CREDIT])
def test_the_job_ended_email_is_in_the_recipients_language(chinese_alice, catalog, status):
    job = seed_job(chinese_alice, status)
    send_job_end_email(job.pk, stopping_for_credit=status == JobStatus.STOPPED_NO_CREDIT)
    (message,) = mail.outbox
    assert re.search(r"[\u4e00-\u9fff]", message.subject) and f"训练任务 {job.pk}" in message.subject
    text, html = bodies(message)
    assert "2026年3月10日 19:00 UTC+8" in text and "2026年3月10日 19:00 UTC+8" in html
    assert_chinese(f"<p>{text}</p>")
    assert_chinese(html)


def test_the_job_ended_email_stays_english_for_an_english_recipient(alice, catalog):
    job = seed_job(alice, JobStatus.SUCCEEDED)
    send_job_end_email(job.pk)
    (message,) = mail.outbox
    assert message.subject == f"Starverse: job {job.pk} finished (alpha)"
    assert "Compute charged for this job: ¥2.40" in message.body and "Ended: 2026-03-10 19:00 UTC+8" in message.body
    assert '<html lang="en">' in bodies(message)[1]


def seed_job(owner, status) -> Job:
    from tests.support.statements import fund, make_job

    fund(owner, "100", "2026-03-10 09:00")
    job = make_job(owner, "alpha")
    allocation = make_allocation(job, "rtx-4090", 2, "2026-03-10 10:00", ended="2026-03-10 11:00")
    charge(allocation, "2026-03-10 10:00", "2026-03-10 11:00", "2.40")
    Job.objects.filter(pk=job.pk).update(status=status, finished_at=at("2026-03-10 11:00"))
    NotificationSettings.objects.update_or_create(user=owner, defaults={"job_emails": True})
    return Job.objects.get(pk=job.pk)


# -- English unchanged -----------------------------------------------------------------------------


def test_the_english_pages_are_unchanged_apart_from_the_zone(client, alice, march, deployment):
    client.force_login(alice)
    billing = client.get("/billing/").content.decode()
    assert '<html lang="en">' in billing and "Card payments" in billing and "Compute is charged every few" in billing
    assert ">Date</th>" in billing and "Date (UTC)" not in billing
    statement = text_of(client.get("/billing/statements/2026-03/").content.decode())
    assert "Statement 2026-03" in statement and "2026-03-01 to 2026-03-31 (UTC+8)" in statement
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Latency, median" in page and "Change replicas" in page and "UTC+8" in page
