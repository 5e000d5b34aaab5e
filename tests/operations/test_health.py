"""/healthz says the process answers without touching a store; /readyz checks every store and periodic process."""

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


def test_ready_when_every_store_and_periodic_process_is_up(client, all_running):
    status, body = ready(client)
    assert status == 200
    assert body == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "ok", "storage": "ok", "beat": "ok", "meter": "ok"},
        "failed": [],
    }


def test_readyz_answers_from_a_thread_that_runs_an_event_loop(client, all_running):
    """Where the caller's thread already runs a loop (a browser driver in the tests, an async client)
    the checks still run: on a loop of their own."""

    async def from_a_coroutine():
        return client.get("/readyz")

    response = asyncio.run(from_a_coroutine())

    assert response.status_code == 200, response.content
    assert response.json()["checks"]["database"] == "ok"


def test_not_ready_before_the_beat_and_the_meter_ever_ran(client, storage_here):
    status, body = ready(client)
    assert status == 503
    assert body["status"] == "unavailable"
    assert body["failed"] == ["beat", "meter"]
    assert body["checks"]["meter"] == "Unavailable: meter: no run recorded"
    assert body["checks"]["database"] == "ok"


def test_a_meter_silent_for_three_periods_makes_the_platform_unready(client, all_running, settings):
    period, within = settings.CELERY_BEAT_SCHEDULE["run-meter"]["schedule"], settings.READY_METER_WITHIN_S
    assert within == 3 * period
    heartbeats.mark("meter", now=timezone.now() - timedelta(seconds=3 * period - 1))
    assert ready(client)[0] == 200
    heartbeats.mark("meter", now=timezone.now() - timedelta(seconds=3 * period + 2))
    status, body = ready(client)
    assert (status, body["failed"]) == (503, ["meter"])
    assert "last ran" in body["checks"]["meter"]


def test_a_silent_beat_makes_the_platform_unready(client, all_running, settings):
    heartbeats.mark("beat", now=timezone.now() - timedelta(seconds=settings.READY_BEAT_WITHIN_S + 2))
    status, body = ready(client)
    assert (status, body["failed"]) == (503, ["beat"])


def test_an_unreachable_redis_is_named(client, all_running, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    status, body = ready(client)
    assert (status, body["failed"]) == (503, ["redis"])
    assert body["checks"]["redis"].startswith("Unavailable: Unable to connect to Redis")


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
    assert "bucket unreachable" in body["checks"]["storage"]


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
