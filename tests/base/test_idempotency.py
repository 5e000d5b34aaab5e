"""Idempotency-Key: one key, one effect, one answer, even for 20 requests at once (docs/RELIABILITY.md #5)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from base.models import IdempotentRequest
from billing.services.stripe_payments.topups import TopupIntent
from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from tests.support.jobs import JOB_SPEC as SPEC
from workers.models import JobEvent

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 20


def at_once(count: int, work):
    """Run `work(i)` in `count` threads released together, each on its own database connection."""
    barrier = Barrier(count)

    def attempt(index: int):
        barrier.wait()
        try:
            return work(index)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(attempt, range(count)))


def post_job(api, key: str | None = None, **change):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return api.post("/api/v1/jobs/", {**SPEC, **change}, format="json", **headers)


@pytest.fixture
def alice_api(api_for, alice, fund, small_fleet, no_celery):
    fund(alice)
    return api_for(alice)


def test_twenty_identical_posts_at_once_create_one_job_and_get_the_same_answer(alice_api, alice):
    responses = at_once(THREADS, lambda _: post_job(alice_api, "launch-7f3a"))

    assert [r.status_code for r in responses] == [201] * THREADS
    assert Job.objects.filter(owner=alice).count() == 1
    bodies = [r.json() for r in responses]
    assert all(body == bodies[0] for body in bodies)
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == THREADS - 1
    assert IdempotentRequest.objects.filter(user=alice, key="launch-7f3a").count() == 1


def test_without_a_key_the_same_twenty_posts_create_twenty_jobs(alice_api, alice, settings):
    """The race the key exists for: a client retrying blindly would start a job per attempt."""
    settings.MAX_QUEUED_JOBS_PER_USER = THREADS  # the cap on waiting jobs would stop a blind retry at 5
    responses = at_once(THREADS, lambda _: post_job(alice_api))

    assert [r.status_code for r in responses] == [201] * THREADS
    assert Job.objects.filter(owner=alice).count() == THREADS


def test_a_sequential_retry_replays_the_first_answer(alice_api, alice):
    first = post_job(alice_api, "retry-1")
    Job.objects.filter(pk=first.json()["id"]).update(status=JobStatus.RUNNING)

    again = post_job(alice_api, "retry-1")

    assert again.status_code == 201
    assert again.json() == first.json()  # the stored answer, not the job as it is now
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Job.objects.filter(owner=alice).count() == 1


def test_the_same_key_with_a_different_body_is_refused_and_creates_nothing(alice_api, alice):
    post_job(alice_api, "reused-key")

    response = post_job(alice_api, "reused-key", max_steps=200)

    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["detail"]
    assert Job.objects.filter(owner=alice).count() == 1


def test_twenty_different_bodies_under_one_key_have_one_effect(alice_api, alice):
    responses = at_once(THREADS, lambda i: post_job(alice_api, "contested", max_steps=100 + i))

    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [422] * (THREADS - 1)
    assert Job.objects.filter(owner=alice).count() == 1


def test_json_key_order_and_spacing_do_not_make_a_different_request(alice_api, alice):
    first = post_job(alice_api, "same-json")
    reordered = dict(reversed(list(SPEC.items())))

    again = alice_api.post("/api/v1/jobs/", reordered, format="json", HTTP_IDEMPOTENCY_KEY="same-json")

    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]


def test_keys_belong_to_their_user(alice_api, api_for, bob, fund, alice):
    fund(bob)
    mine = post_job(alice_api, "shared-name")
    theirs = post_job(api_for(bob), "shared-name")

    assert theirs.status_code == 201 and theirs.json()["id"] != mine.json()["id"]
    assert Job.objects.get(pk=theirs.json()["id"]).owner == bob


def test_a_key_is_forgotten_after_24_hours(alice_api, alice):
    first = post_job(alice_api, "daily-run")

    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        later = post_job(alice_api, "daily-run")

    assert later.status_code == 201
    assert later.json()["id"] != first.json()["id"]
    assert Job.objects.filter(owner=alice).count() == 2


def test_a_refused_request_is_not_stored_so_the_fixed_retry_can_use_the_key(api_for, make_user, fund, small_fleet):
    carol = make_user("carol")  # no credit: the hold check refuses the launch
    api = api_for(carol)

    refused = post_job(api, "first-try")
    fund(carol)
    accepted = post_job(api, "first-try")

    assert refused.status_code == 400 and "balance" in refused.json()["errors"]
    assert accepted.status_code == 201
    assert Job.objects.filter(owner=carol).count() == 1


@pytest.mark.parametrize("key", ["", "has space", "ü-non-ascii", "x" * 256])
def test_a_malformed_key_is_a_400_naming_the_header(alice_api, alice, key):
    response = post_job(alice_api, key)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["errors"]
    assert not Job.objects.filter(owner=alice).exists()


def test_twenty_cancels_at_once_request_the_cancel_once(alice_api, alice):
    job_id = post_job(alice_api).json()["id"]
    Job.objects.filter(pk=job_id).update(status=JobStatus.RUNNING, started_at=timezone.now())

    responses = at_once(
        THREADS, lambda _: alice_api.post(f"/api/v1/jobs/{job_id}/cancel/", HTTP_IDEMPOTENCY_KEY="stop-it")
    )

    assert [r.status_code for r in responses] == [200] * THREADS
    assert len({r.content for r in responses}) == 1
    assert JobEvent.objects.filter(job_id=job_id, kind=JobEventKind.CANCEL_REQUESTED).count() == 1
    assert Job.objects.get(pk=job_id).status == JobStatus.STOPPING


def test_twenty_topups_at_once_ask_the_payment_service_once(api_for, alice, monkeypatch):
    calls = []

    def create_topup(user, micros, *, nonce):
        calls.append(nonce)
        return TopupIntent(f"pi_{len(calls)}", "secret", micros, "CNY", "requires_payment_method")

    monkeypatch.setattr("billing.api.is_configured", lambda: True)
    monkeypatch.setattr("billing.api.topups.create_topup", create_topup)
    api = api_for(alice)

    responses = at_once(
        THREADS,
        lambda _: api.post("/api/v1/topups/", {"amount": "50.00"}, format="json", HTTP_IDEMPOTENCY_KEY="topup-0001"),
    )

    assert [r.status_code for r in responses] == [201] * THREADS
    assert {r.json()["id"] for r in responses} == {"pi_1"}
    assert calls == ["api-topup-0001"]


def test_expired_keys_are_purged(alice_api, alice):
    post_job(alice_api, "old-key")
    post_job(alice_api, "new-key")
    IdempotentRequest.objects.filter(key="old-key").update(created_at=timezone.now() - timedelta(hours=25))

    assert IdempotentRequest.purge_expired() == 1
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new-key"]
