"""PostgreSQL away for a moment: JSON 503s with Retry-After (never an HTML 500), and afterwards no healthy
node is declared lost (docs/RELIABILITY.md #38).

The outage is real, at the connection level: this process's connections go through a TCP proxy
(tests/support/tcp_proxy.py) that the test cuts, so every query fails as it would with the server gone,
while the shared PostgreSQL itself stays up. Before, the site answered HTML 500s for the outage's
few seconds (the session and authentication middlewares read the database before any view), and
when it came back the reconciler found every node silent past the deadline (no heartbeat could be
written meanwhile) and fenced a healthy node.
"""

# ruff: noqa: F811

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from base.outage import database_last_unreachable, forget_database_outage, note_database_error
from fleet.choices import AgentStatus
from fleet.models import Job, Node
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.tcp_proxy import DatabaseProxy, database_behind_a_proxy
from tests.workers.agent_service.test_async_service import RunningService
from workers.services.monitor import reconcile

pytestmark = pytest.mark.django_db(transaction=True)

FAST_S = 2.5  # a refused connection answers at once; room for a shared, busy CPU


@pytest.fixture(autouse=True)
def no_outage_remembered() -> Iterator[None]:
    """The mark is platform-wide (in Redis): left behind, it would keep other tests' silent nodes online."""
    forget_database_outage()
    yield
    forget_database_outage()


@pytest.fixture
def database() -> Iterator[DatabaseProxy]:
    with database_behind_a_proxy() as proxy:
        yield proxy


def timed(call, *args, **kwargs):
    started = time.monotonic()
    response = call(*args, **kwargs)
    return response, time.monotonic() - started


def assert_json_503(response, elapsed: float, what: str) -> None:
    assert elapsed < FAST_S, f"{what} took {elapsed:.1f}s"
    assert response.status_code == 503, f"{what}: {response.status_code} {response.content[:200]!r}"
    assert response["Content-Type"] == "application/json" and response["Retry-After"] == "5", what
    assert response.json() == {
        "detail": "The database is unavailable for a moment; please retry shortly.",
        "code": "service_unavailable",
    }, what


def assert_page_503(response, elapsed: float, what: str) -> None:
    assert elapsed < FAST_S, f"{what} took {elapsed:.1f}s"
    assert response.status_code == 503, f"{what}: {response.status_code}"
    assert response["Content-Type"].startswith("text/html") and response["Retry-After"] == "5", what
    assert b"Try again shortly" in response.content and b"database" in response.content, what


def test_while_the_database_is_away_the_api_answers_json_503s_and_pages_a_503_page(database, alice, enroll, fund):
    fund(alice)
    api = token_client(alice)
    node, node_token = enroll("outage-node")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token}")
    browser = Client()
    browser.force_login(alice)
    assert api.get("/api/v1/account/").status_code == 200  # through the proxy
    # A process's first quote imports the model libraries (seconds on a slow machine): not what is timed here.
    assert api.post("/api/v1/quotes/", JOB_SPEC, format="json").status_code == 200

    database.cut()
    for what, call, path in (
        ("GET account", api.get, "/api/v1/account/"),
        ("GET jobs", api.get, "/api/v1/jobs/"),
        ("GET chips", APIClient().get, "/api/v1/chips/"),
    ):
        assert_json_503(*timed(call, path), what)
    assert_json_503(*timed(api.post, "/api/v1/jobs/", JOB_SPEC, format="json"), "POST job")
    assert_json_503(*timed(agent.post, "/api/v1/agent/poll/", {"wait_s": 0}, format="json"), "agent poll")
    assert_page_503(*timed(browser.get, "/dashboard/"), "dashboard page")
    assert_page_503(*timed(Client().get, "/pricing/"), "pricing page")

    database.restore()
    assert api.get("/api/v1/account/").status_code == 200
    assert browser.get("/dashboard/").status_code == 200
    assert not Job.objects.exists()  # the job refused during the outage left nothing half-written


def test_the_agent_service_answers_a_json_503_while_the_database_is_away(database, enroll):
    node, node_token = enroll("outage-node")
    service = RunningService()
    try:
        assert service.poll(node_token).status_code == 200
        database.cut()
        refused, elapsed = timed(service.poll, node_token)
        assert elapsed < FAST_S + 1, f"the poll took {elapsed:.1f}s"
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["code"] == "service_unavailable"
        assert database_last_unreachable() is not None  # the reconciler will know
        database.restore()
        assert service.poll(node_token).status_code == 200
    finally:
        service.stop()


def test_after_an_outage_a_healthy_node_gets_the_whole_deadline_to_poll_again(database, enroll, settings):
    deadline = settings.AGENT_HEARTBEAT_DEADLINE_S
    node, node_token = enroll("healthy")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token}")
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(seconds=deadline - 2))

    database.cut()
    assert agent.post("/api/v1/agent/poll/", {"wait_s": 0}, format="json").status_code == 503  # not recorded
    database.restore()
    away = database_last_unreachable()
    assert away is not None

    # Silent past the deadline by its last heartbeat, but the platform could not hear it until `away`.
    reconcile(now=away + timedelta(seconds=deadline - 1))
    assert Node.objects.get(pk=node.pk).agent_status == AgentStatus.ONLINE
    # Still silent a whole deadline after the database came back: now it is lost.
    reconcile(now=away + timedelta(seconds=deadline + 1))
    assert Node.objects.get(pk=node.pk).agent_status == AgentStatus.LOST


def test_a_node_silent_long_before_an_outage_is_lost_a_deadline_after_it(enroll, settings):
    deadline = settings.AGENT_HEARTBEAT_DEADLINE_S
    node, _ = enroll("long-gone")
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - timedelta(minutes=10))
    note_database_error(OperationalError("connection refused"), now=now - timedelta(seconds=3))

    assert reconcile(now=now)["lost_nodes"] == 0  # the platform was deaf 3 s ago: not its silence yet
    assert reconcile(now=now + timedelta(seconds=deadline))["lost_nodes"] == 1


def test_a_deadlock_or_a_bad_query_is_not_an_outage(enroll, settings):
    import psycopg.errors

    deadlock = OperationalError("deadlock detected")
    deadlock.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    note_database_error(deadlock)
    note_database_error(ValueError("not a database error"))
    assert database_last_unreachable() is None
