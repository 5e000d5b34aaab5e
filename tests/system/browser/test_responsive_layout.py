"""Every user-facing page on a 390×844 phone and a 1366×900 laptop: nothing wider than the screen, every
navigation link reachable (inline, or behind the Menu button), and on /train/ the quote before the Train button.

`make screenshots` runs the test marked `screenshots` here: the pricing, train, job and bids pages at both
sizes, saved under artifacts/screenshots/.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Browser, BrowserContext, Page, expect

from billing.models import SpotPrice
from billing.services.ledger import balance_of
from fleet.choices import AgentStatus, JobEventKind, JobStatus
from fleet.models import Allocation, ChipType, Dataset, Job, Node
from kernel.money import format_price
from market.models import Bid
from portal.models.tokens import ApiToken
from tests.support.lines import bill_as_charged
from tests.support.portal_pages import PLAN, rank
from tests.support.stored import own_store_url
from workers.models import JobLogLine, JobMetric
from workers.services.events import record_event

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}
SIZES = {"phone": PHONE, "desktop": DESKTOP}

NAV_LINKS = ["Pricing", "Train", "Models", "Jobs", "Deployments", "Bids", "Billing", "Dashboard", "API docs"]

# A name with no spaces: it must wrap (or be cut) rather than push the page sideways.
LONG_NAME = "llama-tiny-finetune-on-customer-support-transcripts-2025-q4-experiment-0042"


@dataclass(frozen=True)
class Site:
    url: str
    session_cookie: dict
    job: Job
    balance: str

    def pages(self, signed_in: bool) -> dict[str, str]:
        """Every user-facing page: name -> path. Signed out, the pages a visitor sees (login, sign-up...)."""
        public = {"home": "/", "pricing": "/pricing/", "404": "/no-such-page/"}
        if not signed_in:
            return {**public, "login": "/accounts/login/", "signup": "/accounts/signup/"}
        return {
            **public,
            "train": "/train/",
            "datasets": "/datasets/",
            "models": "/models/",
            "jobs": "/jobs/",
            "job": f"/jobs/{self.job.pk}/",
            "deployments": "/deployments/",
            "bids": "/bids/",
            "dashboard": "/dashboard/",
            "tokens": "/dashboard/tokens/",
            "billing": "/billing/",
            "usage": "/billing/usage/",
            "statements": "/billing/statements/",
            "statement": f"/billing/statements/{timezone.localdate():%Y-%m}/",
        }


def chip_plan() -> dict:
    """A two-chip-type plan as the planner would store it (the job page draws its chip mix from it), with an
    ETA and total as long as a real quote's (49 min 41 s, ¥3.23): the comparison's columns must fit them."""
    ranks = [
        rank("rtx-4090", "sim-rtx-4090-cn-east-1-node-01", 3, 40_000.0),
        rank("ascend-910b", "sim-ascend-910b-cn-east-1-node-01", 5, 60_000.0),
    ]
    chip_counts = {"rtx-4090": {"on_demand": 1}, "ascend-910b": {"on_demand": 1}}
    return {**PLAN, "ranks": ranks, "chip_counts": chip_counts, "eta_seconds": 2_981.0, "total_cost": 3_230_000}


def running_job(owner) -> Job:
    """A spot job halfway through, with events, metrics and a long log line: the job page has all its parts."""
    now = timezone.now()
    job = Job.objects.create(
        owner=owner,
        name=LONG_NAME,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=200,
        max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING,
        plan=chip_plan(),
        epoch=1,
        step=50,
        loss=2.5,
        first_loss=6.2,
        tokens_per_s=1_024.0,
        started_at=now - timedelta(minutes=48),  # projected: 3 h 12 min, as wide as a real run's figures
        spot=True,
        spot_bid_per_hour=900_000,
    )
    record_event(job, JobEventKind.PLACED, "Placed on 1 × rtx-4090 + 1 × ascend-910b: " + LONG_NAME)
    JobMetric.objects.bulk_create(
        JobMetric(job=job, epoch=1, rank=rank, step=step, loss=6.2 - step * 0.07, tokens_per_s=speed, created_at=now)
        for step in range(1, 51)
        for rank, speed in enumerate((400.0, 624.0))
    )
    JobLogLine.objects.create(
        job=job, epoch=1, rank=1, line=f"step 50 loss 2.5000 checkpoint={LONG_NAME * 2}", created_at=now
    )
    return job


def spot_price_history() -> None:
    """A few hours of clearings for two chip types, so the pricing and bids pages draw their charts."""
    now = timezone.now()
    for slug, path in {"rtx-4090": [50, 50, 72, 95, 80, 64], "ascend-910b": [60, 60, 60, 85, 110, 70]}.items():
        chip = ChipType.objects.get(slug=slug)
        floor = chip.prices.order_by("-effective_at").first().spot_floor_per_hour
        for index, cents in enumerate(path):
            SpotPrice.objects.create(
                chip_type=chip,
                at=now - timedelta(hours=5) + timedelta(minutes=50 * index),
                price_per_hour=cents * 10_000,
                floor_per_hour=floor,
                capacity=8,
                demand=4 + index,
                allocated=min(8, 4 + index),
            )


@pytest.fixture
def site(live_server, alice, fund, settings, tmp_path, monkeypatch) -> Site:
    """Alice, funded, with a running job, a spot bid, a dataset and an API token; her session cookie."""
    settings.STORAGE_URL = own_store_url(tmp_path)
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)
    call_command("seed_catalog", stdout=io.StringIO())
    Node.objects.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    fund(alice)
    spot_price_history()
    job = running_job(alice)
    placed_on = Node.objects.filter(pool__chip_type__slug="rtx-4090").first()
    billed = Allocation.objects.create(  # billed so far: the job page compares the quote with what it costs
        job=job,
        node=placed_on,
        chip_type=placed_on.pool.chip_type,
        chips=1,
        epoch=1,
        started_at=job.started_at,
        billed_through=job.started_at,
    )
    bill_as_charged(billed, 1_500)
    Bid.objects.create(
        owner=alice,
        job=job,
        chip_type=ChipType.objects.get(slug="rtx-4090"),
        chips=2,
        max_price_per_hour=900_000,
        placed_at=timezone.now(),
    )
    Dataset.objects.create(
        owner=alice,
        name=LONG_NAME,
        kind="text",
        store_prefix=f"datasets/{alice.pk}/support",
        file_name="data.txt",
        size_bytes=12_345,
        samples=321,
    )
    ApiToken.issue(alice, name=LONG_NAME)
    client = Client()
    client.force_login(alice)
    cookie_name = django_settings.SESSION_COOKIE_NAME
    cookie = {"name": cookie_name, "value": client.cookies[cookie_name].value, "url": live_server.url}
    return Site(url=live_server.url, session_cookie=cookie, job=job, balance=format_price(balance_of(alice)))


@pytest.fixture
def open_page(chromium: Browser, site: Site) -> Iterator:
    """open_page(size, signed_in) -> a Page in a fresh browser context of that viewport; closed after the test."""
    contexts: list[BrowserContext] = []

    def open_(viewport: dict, signed_in: bool) -> Page:
        context = chromium.new_context(viewport=viewport)
        contexts.append(context)
        if signed_in:
            context.add_cookies([site.session_cookie])
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    yield open_
    for context in contexts:
        context.close()


def overflow(page: Page) -> str | None:
    """None when the page is no wider than the window; else how wide, and the elements that stick out."""
    return page.evaluate(
        """() => {
          const width = document.documentElement.scrollWidth, inner = window.innerWidth;
          if (width <= inner) return null;
          const clipped = el => {  // inside a box that scrolls, unless positioned out of it
            const box = el.parentElement && el.parentElement.closest('.table-wrap, .log, .code-block, pre');
            return box && !['absolute', 'fixed'].includes(getComputedStyle(el).position);
          };
          const culprits = [...document.querySelectorAll('body *')]
            .filter(el => el.checkVisibility() && el.getBoundingClientRect().right > inner + 1 && !clipped(el))
            .slice(-5)
            .map(el => el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).replace(/ +/g, '.') : '')
                       + ' (' + Math.round(el.getBoundingClientRect().right) + 'px)');
          return `${width}px wide in a ${inner}px window: ${culprits.join(', ')}`;
        }"""
    )


def unreachable_nav(page: Page, signed_in: bool) -> list[str]:
    """The header's entries that can't be seen within the window, after opening the menu if there is one."""
    toggle = page.get_by_test_id("nav-toggle")
    if toggle.is_visible():
        toggle.click()
    account = ["Log out", "Balance"] if signed_in else ["Log in", "Sign up"]
    return page.evaluate(
        """names => {
          const entries = [...document.querySelectorAll('.site-header a, .site-header button')];
          const seen = el => {
            const box = el.getBoundingClientRect();
            return el.checkVisibility() && box.width > 0 && box.left >= 0 && box.right <= window.innerWidth;
          };
          return names.filter(name => !entries.some(el => el.textContent.trim().startsWith(name) && seen(el)));
        }""",
        NAV_LINKS + account,
    )


def settle(page: Page, name: str, signed_in: bool) -> None:
    """Wait for what a page fills in after loading (the quote, the charts): the layout is then final."""
    if name == "train":
        page.get_by_test_id("quote-chips").wait_for()
    elif name == "job":
        expect(page.get_by_test_id("charts")).to_have_class(re.compile(r"\bhas-data\b"))
    elif name in ("bids", "pricing"):
        expect(page.get_by_test_id("spot-chart")).to_have_attribute("data-drawn", "true")


def check_page(page: Page, site: Site, name: str, path: str, signed_in: bool) -> list[str]:
    response = page.goto(site.url + path)
    expected = 404 if name == "404" else 200
    problems = [] if response.status == expected else [f"answered {response.status}, not {expected}"]
    if response.status == expected:
        settle(page, name, signed_in)
    if width := overflow(page):
        problems.append(width)
    if name == "train":
        quote = page.locator("#quote-card").bounding_box()
        button = page.get_by_role("button", name="Train", exact=True).bounding_box()
        beside = page.evaluate("window.innerWidth") >= 1000
        if not (quote["y"] < button["y"] if beside else quote["y"] + quote["height"] <= button["y"]):
            problems.append(f"the quote ({quote}) is not above the Train button ({button})")
    if missing := unreachable_nav(page, signed_in):
        problems.append(f"navigation out of reach: {missing}")
    elif width := overflow(page):  # the open menu must fit too
        problems.append(f"with the menu open: {width}")
    return [f"{name} ({path}): {problem}" for problem in problems]


@pytest.mark.parametrize("size", SIZES)
def test_every_page_fits_the_screen_and_reaches_every_link(site, open_page, size):
    problems = []
    for signed_in in (False, True):
        page = open_page(SIZES[size], signed_in)
        for name, path in site.pages(signed_in).items():
            problems += check_page(page, site, name, path, signed_in)
    assert not problems, f"at {size} size:\n" + "\n".join(problems)


# What a phone must show and let press without a sideways scroll: a table that scrolls inside its box keeps the
# page from widening, but hides its right-hand columns (the bids' Update and Cancel, the spot price and chips
# online, a rank's mode and how far off the quote is).
PHONE_ESSENTIALS = {
    "bids": ["[data-testid=bids-table] .bid-change button", "[data-testid=bid-cancel]"],
    "pricing": ["[data-testid=spot]", "[data-testid=chips-online]"],
    "job": ["[data-testid=rank-mode]", "[data-testid=off-by]"],
}


def out_of_view(page: Page, selector: str) -> list[str]:
    """Each element the selector finds that is hidden, past the window's edges, or in a box scrolled or
    scrollable sideways; one problem when it finds none."""
    return page.evaluate(
        """selector => {
          const found = [...document.querySelectorAll(selector)];
          if (!found.length) return [`${selector}: nothing found`];
          return found.flatMap(el => {
            const box = el.getBoundingClientRect(), scroller = el.closest('.table-wrap, .table-scroll');
            const sideways = scroller && scroller.scrollWidth > scroller.clientWidth + 1;
            const seen = el.checkVisibility() && box.width > 0 && box.left >= 0 && box.right <= window.innerWidth;
            return seen && !sideways ? [] : [`${selector} at ${Math.round(box.left)}-${Math.round(box.right)}px`
              + (sideways ? ` in a box ${scroller.scrollWidth}px wide for ${scroller.clientWidth}px` : '')];
          });
        }""",
        selector,
    )


@pytest.mark.parametrize("name", PHONE_ESSENTIALS)
def test_on_a_phone_what_a_page_is_for_is_seen_without_a_sideways_scroll(site, open_page, name):
    page = open_page(PHONE, signed_in=True)
    page.goto(site.url + site.pages(signed_in=True)[name])
    settle(page, name, signed_in=True)

    problems = [problem for selector in PHONE_ESSENTIALS[name] for problem in out_of_view(page, selector)]

    assert not problems, f"{name} on a phone:\n" + "\n".join(problems)


def test_the_first_key_press_reaches_a_skip_link_that_jumps_to_the_content(site, open_page):
    page = open_page(PHONE, signed_in=False)
    page.goto(site.url + "/pricing/")
    page.keyboard.press("Tab")
    skip = page.get_by_test_id("skip-link")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()


def test_the_header_shows_the_balance_and_links_to_billing(site, open_page):
    page = open_page(PHONE, signed_in=True)
    page.goto(f"{site.url}/dashboard/")
    page.get_by_test_id("nav-toggle").click()
    balance = page.get_by_test_id("header-balance")
    expect(balance).to_contain_text(site.balance)
    balance.click()
    expect(page).to_have_url(f"{site.url}/billing/")
    # The menu is closed again on the new page; its Billing entry is the current one.
    expect(page.locator(".nav-links a", has_text="Billing")).to_have_attribute("aria-current", "page")


SCREENSHOT_PAGES = ["pricing", "train", "job", "bids"]


@pytest.mark.screenshots
def test_screenshots_of_the_main_pages(site, open_page, screenshots: Path, request, capsys):
    """`make screenshots`: what the pricing, train, job and bids pages look like on a laptop and on a phone."""
    saved = []
    for size, viewport in SIZES.items():
        page = open_page(viewport, signed_in=True)
        pages = site.pages(signed_in=True)
        for name in SCREENSHOT_PAGES:
            page.goto(site.url + pages[name])
            settle(page, name, signed_in=True)
            path = screenshots / f"{name}-{size}.png"
            page.screenshot(path=str(path), full_page=True)
            saved.append(path)
    for path in saved:
        assert path.stat().st_size > 10_000, f"{path} looks blank"
    if "screenshots" in request.config.option.markexpr:  # run for them (`make screenshots`): say where they are
        with capsys.disabled():
            print("", *saved, sep="\n")
