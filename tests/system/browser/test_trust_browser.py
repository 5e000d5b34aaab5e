"""Quotes people can believe, in a real browser on a laptop and a phone: capacity that exists, a "does not
fit" that names the real limit, a quote that says how sure it is and what each policy would pick, and the
job page's quote against actual."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from fleet.choices import AgentStatus
from fleet.models import Node
from tests.system.browser.test_responsive_layout import SIZES, open_page, overflow, site  # noqa: F401 - fixtures

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("size", SIZES)
def test_pricing_counts_chips_online_and_says_which_are_declared_but_offline(site, open_page, size):  # noqa: F811
    Node.objects.filter(pool__chip_type__slug="h100-80g").update(agent_status=AgentStatus.UNENROLLED)
    page = open_page(SIZES[size], signed_in=False)
    page.goto(f"{site.url}/pricing/")
    h100 = page.locator('tr[data-chip="h100-80g"]')
    expect(h100.get_by_test_id("chips-online")).to_have_text("none online")
    expect(h100.get_by_test_id("chips-offline")).to_have_text("8 declared, offline")
    expect(page.locator('tr[data-chip="a100-80g"]').get_by_test_id("chips-online")).to_contain_text("8 online")
    assert overflow(page) is None


@pytest.mark.parametrize("size", SIZES)
def test_the_quote_says_how_sure_it_is_lists_each_policys_plan_and_names_the_real_limit(site, open_page, size):  # noqa: F811
    page = open_page(SIZES[size], signed_in=True)
    page.goto(f"{site.url}/train/")
    expect(page.get_by_test_id("quote-accuracy")).to_contain_text("No measurements yet")
    page.get_by_text("What each policy would pick").click()
    policies = page.get_by_test_id("quote-policies")
    for policy in ("cost-performance", "fastest", "cheapest"):
        expect(policies.locator(f'tr[data-policy="{policy}"]')).to_be_visible()
    expect(policies.locator('tr[data-policy="cost-performance"]')).to_contain_text("chosen")
    assert overflow(page) is None

    # Only small chips online: llama-2-70b fits nowhere, and the box says what stands in the way.
    Node.objects.exclude(pool__chip_type__slug__in=["rtx-4090", "tpu-v5e"]).update(agent_status=AgentStatus.OFFLINE)
    page.get_by_label("Model").select_option("llama-2-70b")
    problem = page.get_by_test_id("quote-problem")
    expect(problem).to_contain_text("llama-2-70b does not fit on the")
    expect(problem).to_contain_text("every chip needs")
    expect(problem).to_contain_text("It would fit on")
    assert overflow(page) is None


@pytest.mark.parametrize("size", SIZES)
def test_the_job_page_shows_the_quote_against_what_the_run_does(site, open_page, size):  # noqa: F811
    page = open_page(SIZES[size], signed_in=True)
    page.goto(f"{site.url}/jobs/{site.job.pk}/")
    table = page.get_by_test_id("planned-vs-actual")
    expect(table).to_contain_text("Quoted against actual")
    expect(table.get_by_test_id("speed")).to_contain_text("100,000")
    expect(table.get_by_test_id("speed")).to_contain_text("1,024")
    expect(table.get_by_test_id("run-time")).to_be_visible()
    expect(table.get_by_test_id("run-cost")).to_be_visible()
    assert overflow(page) is None
