"""The Train page in a real browser at 1366×900 and 390×844: spot terms, the bid hint, the quote and the button."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from billing.models import SpotPrice
from fleet.choices import AgentStatus
from fleet.models import ChipType, Node

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}


@pytest.fixture
def train_page(live_server, alice, fund, chromium: Browser, monkeypatch) -> Iterator:
    """train_page(viewport) -> alice's /train/ in a fresh browser context, the quote in."""
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    call_command("seed_catalog", stdout=io.StringIO())
    Node.objects.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    fund(alice, "100")
    for chip in ChipType.objects.filter(slug__in=["rtx-4090", "tpu-v5e"]):
        floor = chip.prices.order_by("-effective_at").first().spot_floor_per_hour
        SpotPrice.objects.create(
            chip_type=chip, at=timezone.now() - timedelta(hours=2), price_per_hour=floor, floor_per_hour=floor,
            capacity=4, demand=1, allocated=1,
        )  # fmt: skip
    client = Client()
    client.force_login(alice)
    name = django_settings.SESSION_COOKIE_NAME
    cookie = {"name": name, "value": client.cookies[name].value, "url": live_server.url}
    contexts = []

    def open_(viewport: dict, path: str = "/train/") -> Page:
        context = chromium.new_context(viewport=viewport)
        contexts.append(context)
        context.add_cookies([cookie])
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(live_server.url + path)
        page.get_by_test_id("quote-chips").wait_for(timeout=60_000)  # a cold server's first quote takes a while
        return page

    yield open_
    for context in contexts:
        context.close()


def spot_on(page: Page) -> None:
    page.locator("#id_spot").check()
    expect(page.get_by_test_id("bid-hint-chip").first).to_be_visible(timeout=30_000)  # after the next quote


def test_ticking_spot_offers_a_default_bid_and_no_error(train_page, screenshots):
    """Before, the bid field was empty and the quote turned into a red "A spot job needs a bid" at once."""
    page = train_page(DESKTOP)

    spot_on(page)

    expect(page.locator("#id_bid")).to_have_value("0.90")  # the lowest on-demand price of the spot chip types
    expect(page.get_by_test_id("quote-chips")).to_contain_text("Spot")
    expect(page.get_by_test_id("quote-problem")).to_have_count(0)
    expect(page.locator(".field-error")).to_have_count(0)
    page.screenshot(path=str(screenshots / "train-spot-desktop.png"), full_page=True)


def test_the_bid_hint_names_only_chip_types_that_take_spot_bids_one_line_each(train_page, screenshots):
    page = train_page(DESKTOP)
    page.locator("#id_policy").select_option("fastest")  # a plan on many chip types, spot or not
    spot_on(page)

    chips = page.get_by_test_id("bid-hint-chip")
    expect(chips.first).to_be_visible()
    slugs = chips.evaluate_all("nodes => nodes.map(node => node.dataset.chip)")
    spot_types = set(Node.objects.filter(spot_eligible=True).values_list("pool__chip_type__slug", flat=True))
    assert slugs and set(slugs) <= spot_types, slugs  # the seed's A100 and H100 take no spot bids
    # Each chip type's prices on one line (they broke into seven: the form styled their spans as help text).
    prices = page.locator(".bid-hint .bid-prices")
    heights = prices.evaluate_all("nodes => nodes.map(node => node.getBoundingClientRect().height)")
    line = prices.first.evaluate("node => parseFloat(getComputedStyle(node).lineHeight)")
    assert all(height < 1.5 * line for height in heights), (heights, line)
    page.screenshot(path=str(screenshots / "train-spot-hint-desktop.png"), full_page=True)


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_no_select_on_the_train_page_cuts_its_options_off(train_page, size):
    page = train_page({"desktop": DESKTOP, "phone": PHONE}[size])

    cut = page.evaluate(
        """() => {
          const canvas = document.createElement('canvas').getContext('2d');
          return [...document.querySelectorAll('#train-form select')].flatMap(select => {
            const style = getComputedStyle(select);
            canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
            // the text box: the select's width less its padding, borders and the arrow (about 1.5em)
            const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
                         - 1.5 * parseFloat(style.fontSize);
            return [...select.options].filter(o => canvas.measureText(o.text).width > room)
                                      .map(o => `${select.name}: "${o.text}" in ${Math.round(room)}px`);
          });
        }"""
    )

    assert not cut, cut


def test_the_train_button_is_in_view_at_1366_by_900(train_page, screenshots):
    page = train_page(DESKTOP)

    expect(page.get_by_role("button", name="Train", exact=True)).to_be_in_viewport(ratio=1)
    page.screenshot(path=str(screenshots / "train-desktop-fold.png"))
    page.mouse.wheel(0, 600)  # still there, over the fields, as they scroll
    expect(page.get_by_role("button", name="Train", exact=True)).to_be_in_viewport(ratio=1)
