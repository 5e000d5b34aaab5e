"""One click in a real browser starts a real mixed-chip run, and the job page follows it to 100%."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node
from tests.support.accounts import PASSWORD
from tests.support.stack import platform_stack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_run_launched_in_one_click_reaches_100_percent(
    fund, live_server, settings, tmp_path, alice, browser_page, screenshots
):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    page = browser_page
    with platform_stack(live_server, settings, tmp_path) as stack:
        stack.add_agent("ui-rtx-4090", "rtx-4090")
        stack.add_agent("ui-ascend-910b", "ascend-910b")
        wait_until(
            lambda: Node.objects.filter(hostname__startswith="ui-", agent_status=AgentStatus.ONLINE).count() == 2,
            60,
            "the agents to enroll",
            stack,
        )

        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=login]", "alice")
        page.fill("input[name=password]", PASSWORD)
        page.locator("main button[type=submit]").click()
        page.goto(f"{live_server.url}/train/")
        page.select_option("select[name=policy]", "fastest")
        page.fill("input[name=max_steps]", "30")
        quote = page.get_by_test_id("quote-chips")
        quote.wait_for()
        assert "simulated" in quote.inner_text()
        page.screenshot(path=str(screenshots / "e2e-train.png"), full_page=True)

        page.get_by_role("button", name="Train").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        progress = page.get_by_test_id("progress-text")
        progress.filter(has_text="100%").wait_for(timeout=180_000)

        job = Job.objects.get(owner=alice)
        wait_until(  # the final checkpoint and the model's export come after the last step: minutes when CI is busy
            lambda: Job.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).exists(),
            180,
            "the job to succeed",
            stack,
        )
        page.get_by_text("Succeeded").first.wait_for(timeout=10_000)
        assert "Step 30 of 30" in progress.inner_text()
        page.screenshot(path=str(screenshots / "e2e-job-finished.png"), full_page=True)
