"""/healthz says the process answers without touching a store; /readyz says whether this instance can serve:
its database and its storage. Redis, beat and the meter are shared by every instance, so they are in /metrics
and its alerts, never in /readyz (a stalled beat would take every instance out of the load balancer at once)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
import redis
from celery.signals import after_task_publish, beat_init
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from base import heartbeats
from billing import tasks as billing_tasks
from portal import beat

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_heartbeats():
    from django.core.cache import cache

    for name in ("beat", "meter", "ledger_audit"):
        cache.delete(heartbeats.KEY.format(name=name))


@pytest.fixture
def storage_here(settings, tmp_path):
    settings.STORAGE_URL = f"file://{tmp_path / 'store'}"


@pytest.fixture
def all_running(storage_here):
    """The beat published and the meter ran just now."""
    heartbeats.mark("beat")
    heartbeats.mark("meter")


def ready(client):
    response = client.get("/readyz")
    return response.status_code, json.loads(response.content)


def test_healthz_answers_without_touching_the_database_or_redis(client, monkeypatch):
    def untouchable(*args, **kwargs):
        raise AssertionError("healthz touched a store")

    with monkeypatch.context() as stores_gone:  # undone before the ledger check that follows every test
        stores_gone.setattr(BaseDatabaseWrapper, "ensure_connection", untouchable)
        stores_gone.setattr(redis.Redis, "execute_command", untouchable)
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_ready_when_the_database_and_storage_answer(client, all_running):
    status, body = ready(client)
    assert status == 200
    assert body == {"status": "ok", "checks": {"database": "ok", "storage": "ok"}, "failed": []}


def test_readyz_answers_from_a_thread_that_runs_an_event_loop(client, all_running):
    """Where the caller's thread already runs a loop (a browser driver in the tests, an async client)
    the checks still run: on a loop of their own."""

    async def from_a_coroutine():
        return client.get("/readyz")

    response = asyncio.run(from_a_coroutine())

    assert response.status_code == 200, response.content
    assert response.json()["checks"]["database"] == "ok"


def test_an_instance_is_ready_though_the_beat_and_the_meter_never_ran(client, storage_here):
    status, body = ready(client)
    assert (status, body["failed"]) == (200, [])
    assert set(body["checks"]) == {"database", "storage"}


def test_a_silent_beat_or_meter_leaves_every_instance_in_service(client, all_running, settings):
    long_ago = timezone.now() - timedelta(hours=1)
    heartbeats.mark("beat", now=long_ago)
    heartbeats.mark("meter", now=long_ago)
    assert ready(client) == (200, {"status": "ok", "checks": {"database": "ok", "storage": "ok"}, "failed": []})


def test_an_unreachable_redis_leaves_the_instance_ready(client, all_running, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1; /metrics reports it
    assert ready(client)[0] == 200


def test_an_unreachable_database_is_named_without_its_address(client, all_running, monkeypatch):
    from django.db import OperationalError

    def refused(self):
        raise OperationalError('connection to server at "db.internal.example" (10.9.8.7), port 5432 failed')

    monkeypatch.setattr(BaseDatabaseWrapper, "temporary_connection", refused)
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["failed"] == ["database"]
    assert response.json()["checks"]["database"] == "Unavailable: the database did not answer (OperationalError)"
    assert b"10.9.8.7" not in response.content and b"db.internal" not in response.content


def test_unusable_storage_is_named(client, all_running, settings):
    settings.STORAGE_URL = "file:///proc/starverse-cannot-write-here"
    status, body = ready(client)
    assert (status, body["failed"]) == (503, ["storage"])
    assert body["checks"]["storage"].startswith("Unavailable: storage ping failed (StorageError")


def test_storage_is_checked_through_the_platform_store(client, all_running, monkeypatch):
    pings = []

    class Store:
        def ping(self):
            pings.append(1)
            raise ConnectionError("bucket unreachable")

    monkeypatch.setattr("workers.services.storage.platform_store", lambda: Store())
    status, body = ready(client)
    assert (status, body["failed"], pings) == (503, ["storage"], [1])
    assert body["checks"]["storage"] == "Unavailable: storage ping failed (ConnectionError)"


def test_a_failing_storage_check_names_no_server_address_or_path(client, all_running, monkeypatch):
    class Store:
        def ping(self):
            raise ConnectionError('Could not connect to the endpoint URL: "http://10.1.2.3:8333/starverse/ping"')

    monkeypatch.setattr("workers.services.storage.platform_store", lambda: Store())
    response = client.get("/readyz")
    assert response.status_code == 503
    assert b"10.1.2.3" not in response.content and b"8333" not in response.content


def test_a_storage_folder_that_cannot_be_written_is_named_without_its_path(client, all_running, settings):
    settings.STORAGE_URL = "file:///proc/starverse-cannot-write-here"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert b"/proc" not in response.content and b"starverse-cannot-write-here" not in response.content


def test_the_meter_and_the_ledger_audit_leave_their_heartbeats():
    billing_tasks.run_meter()
    billing_tasks.audit_ledger()
    assert heartbeats.last("meter").age_seconds() < 5
    audit = heartbeats.last("ledger_audit")
    assert audit.age_seconds() < 5
    assert audit.facts == {"problems": 0}


def test_the_beat_marks_each_task_it_publishes():
    assert heartbeats.last("beat") is None
    after_task_publish.send(sender="workers.tasks.reconcile_jobs")  # a worker or the web publishing: no mark
    assert heartbeats.last("beat") is None
    try:
        beat_init.send(sender=None)
        first = heartbeats.last("beat")
        assert first is not None
        after_task_publish.send(sender="workers.tasks.reconcile_jobs")
        assert heartbeats.last("beat").at >= first.at
    finally:
        after_task_publish.disconnect(beat.mark_beat_tick, dispatch_uid="starverse-beat-tick")
