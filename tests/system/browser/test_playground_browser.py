"""The playground in a real browser: a message goes through the gateway (POST /v1/chat/completions as the
signed-in user) to a live `transformers serve` engine on a tiny model, and the answer streams into the page
with its time to first token and tokens/s; the deployment page then counts the request and charts it.
The deployment and its replica job are written to the database directly (no planner, no agent)."""

from __future__ import annotations

import re
import time

import pytest
from django.urls import NoReverseMatch, reverse
from playwright.sync_api import Browser, Page, expect

from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, ServedRequest
from hosts.serving.process import EngineProcess, free_port
from kernel.serving import EngineLaunch
from tests.support.accounts import PASSWORD
from tests.support.deployment_pages import make_deployment, make_replica
from workers.models import JobLogLine

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NAME = "tiny-chat"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def engine(model_dirs, tmp_path_factory):
    """`transformers serve` on the tiny Llama, answering to the deployment's name."""
    launch = EngineLaunch(
        model=str(model_dirs["llama"]),
        served_model_name=NAME,
        port=free_port(),
        max_model_len=256,
        simulated=True,
        chip_type="tpu-v5e",
        deployment_id=1,
        run_dir=str(tmp_path_factory.mktemp("playground-replica")),
    )
    engine = EngineProcess(launch).start()
    try:
        yield engine.wait_ready(timeout_s=180)
    finally:
        engine.stop()


def gateway_route_exists() -> bool:
    try:
        reverse("openai-chat-completions")
    except NoReverseMatch:
        return False
    return True


def signed_in(chromium: Browser, url: str) -> tuple[Page, list[str]]:
    context = chromium.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    expect(page).to_have_url(f"{url}/dashboard/")
    return page, problems


def test_a_message_in_the_playground_streams_an_answer_with_its_timings(
    live_server, alice, catalog, engine, chromium, screenshots
):
    deployment = make_deployment(alice, name=NAME, status=DeploymentStatus.READY, max_model_len=256)
    replica = make_replica(
        deployment,
        {"state": "ready", "url": engine.url, "engine": "transformers", "simulated": True, "device": "cpu"},
        status=JobStatus.RUNNING,
    )
    JobLogLine.objects.create(job=replica, epoch=1, rank=0, line="engine ready", created_at=replica.started_at)
    page, problems = signed_in(chromium, live_server.url)
    page.goto(f"{live_server.url}/deployments/{deployment.pk}/playground/")
    if not gateway_route_exists():
        pytest.skip("The gateway's POST /v1/chat/completions (openai_api/urls.py) is not there yet.")

    page.get_by_test_id("system-prompt").fill("You answer briefly.")
    page.get_by_test_id("max-tokens").fill("12")
    page.get_by_test_id("temperature").fill("0")
    page.get_by_test_id("chat-message").fill("the chip runs fast")
    page.get_by_test_id("chat-send").click()

    answer = page.locator(".chat-message[data-role=assistant][data-done=true]")
    expect(answer).to_have_count(1, timeout=60_000)
    assert answer.locator(".chat-text").inner_text().strip()
    stats = page.get_by_test_id("chat-stats")
    expect(stats).to_have_text(re.compile(r"Time to first token \d+(\.\d+)? m?s · [\d.]+ tokens/s · 12 tokens"))
    expect(page.locator(".chat-message[data-role=user]")).to_have_text(re.compile("the chip runs fast"))
    page.screenshot(path=str(screenshots / "deployment-playground.png"), full_page=True)

    served = wait_for_record(deployment)
    assert served.stream and served.status_code == 200 and served.completion_tokens == 12
    assert served.first_byte_ms is not None and served.replica_id == replica.pk

    page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    expect(page.get_by_test_id("requests")).to_have_text("1")
    expect(page.get_by_test_id("simulated")).to_be_visible()
    expect(page.get_by_test_id("charts")).to_have_class(re.compile(r"\bhas-data\b"))
    page.screenshot(path=str(screenshots / "deployment-page.png"), full_page=True)
    for name, path in (("deployments", "/deployments/"), ("deployment-new", "/deployments/new/?model=job:42")):
        page.goto(f"{live_server.url}{path}")
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/deployments/{deployment.pk}/playground/")
    page.screenshot(path=str(screenshots / "deployment-playground-phone.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # nothing wider than a phone
    assert problems == []


def wait_for_record(deployment: Deployment, timeout_s: float = 30) -> ServedRequest:
    """The gateway writes its record once the stream has been sent: it may land just after the page shows it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        served = ServedRequest.objects.filter(deployment=deployment).first()
        if served is not None:
            return served
        time.sleep(0.1)
    raise AssertionError("the gateway recorded no request")
