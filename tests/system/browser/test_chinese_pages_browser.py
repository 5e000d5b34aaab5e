"""Every main page in a Chinese browser (Chromium with locale zh-CN), signed out and signed in: each text a person
can see (and each title, placeholder and aria-label of a visible element) holds Chinese, or only names, units
and numbers (tests/portal/i18n/visible_text.py). What the page scripts write (the live quote, charts, the
playground) counts too, since the text is read after the scripts ran."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from fleet.choices import JobStatus
from tests.portal.i18n.visible_text import needs_translation
from tests.support.accounts import PASSWORD
from tests.support.deployment_pages import make_deployment
from tests.support.portal_pages import PLAN, make_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIGNED_OUT = ["/", "/pricing/", "/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"]
SIGNED_IN = [
    "/dashboard/",
    "/dashboard/tokens/",
    "/train/",
    "/jobs/",
    "/jobs/{job}/",
    "/models/",
    "/datasets/",
    "/deployments/",
    "/deployments/new/",
    "/deployments/{deployment}/",
    "/deployments/{deployment}/playground/",
    "/bids/",
    "/billing/",
    "/billing/usage/",
    "/billing/statements/",
]
OWN_NAMES = ("test funds", "alice", "alice@example.com", "lin-run", "lin-chat", "llama-tiny", "job:1")

# The visible text nodes and read attributes of the page, skipping code, scripts and English-marked parts.
VISIBLE_TEXTS = """() => {
  const skip = (el) => el.closest(
    'code, pre, script, style, kbd, samp, template, noscript, svg, [translate=no], [lang^=en]');
  const seen = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement, text = node.textContent.trim();
    if (text && el && !skip(el) && el.checkVisibility()) seen.push(text);
  }
  for (const el of document.querySelectorAll('[title], [placeholder], [aria-label], img[alt]')) {
    if (skip(el) || !el.checkVisibility()) continue;
    for (const name of ['title', 'placeholder', 'aria-label', 'alt']) {
      const value = (el.getAttribute(name) || '').trim();
      if (value) seen.push(value);
    }
  }
  return seen;
}"""


def english_on(page: Page, url: str) -> list[str]:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    texts = [" ".join(text.split()) for text in page.evaluate(VISIBLE_TEXTS)]
    return sorted({text for text in texts if needs_translation(text, OWN_NAMES)})


@pytest.fixture
def chinese_page(chromium: Browser):
    context = chromium.new_context(locale="zh-CN", viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def test_every_page_reads_in_chinese_signed_out_and_signed_in(live_server, alice, catalog, fund, chinese_page):
    fund(alice, "50")
    job = make_job(
        alice, name="lin-run", status=JobStatus.RUNNING, plan=PLAN, epoch=1, step=40, started_at=timezone.now()
    )
    deployment = make_deployment(alice, name="lin-chat")
    found: dict[str, list[str]] = {}
    for path in SIGNED_OUT:
        found[path] = english_on(chinese_page, live_server.url + path)

    chinese_page.goto(f"{live_server.url}/accounts/login/")
    chinese_page.fill("input[name=login]", "alice")
    chinese_page.fill("input[name=password]", PASSWORD)
    chinese_page.locator("main button[type=submit]").click()
    expect(chinese_page).to_have_url(f"{live_server.url}/dashboard/")
    for path in SIGNED_IN:
        path = path.format(job=job.pk, deployment=deployment.pk)
        found[path] = english_on(chinese_page, live_server.url + path)

    english = {path: texts for path, texts in found.items() if texts}
    assert not english, "English on Chinese pages:\n" + json.dumps(english, ensure_ascii=False, indent=1)
