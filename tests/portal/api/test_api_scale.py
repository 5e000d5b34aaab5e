"""The API at scale: lists cost the same number of queries for 30 items as for 1, pages are bounded and
sized on request, and a token's lookup is cached without letting a revoked, expired or disabled token in.

The load itself (>= 300 reads/s at 50 clients) is measured by bench/api_load.py, not here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.services.credits import adjust_credit
from fleet.choices import JobStatus, MigrationReason
from fleet.models import ChipType, Job
from kernel.money import to_micros
from market.models import Bid, BidStatus
from portal.api.pagination import BoundedPageNumberPagination
from portal.models import ApiToken
from tests.support.accounts import client_with
from workers.models import JobMigration

pytestmark = pytest.mark.django_db


def make_jobs(user, count: int) -> list[Job]:
    """Finished spot jobs, every other one with a migration (the list nests them)."""
    now = timezone.now()
    jobs = []
    for n in range(count):
        job = Job.objects.create(
            owner=user,
            name=f"run {n}",
            model_name="llama-tiny",
            per_device_batch_size=4,
            max_steps=100,
            max_budget_per_hour=to_micros("28"),
            spot=True,
            spot_bid_per_hour=to_micros("1"),
            status=JobStatus.SUCCEEDED,
        )
        if n % 2:
            JobMigration.objects.create(
                job=job, reason=MigrationReason.OUTBID, from_epoch=1, notice_at=now, notice_seconds=30
            )
        jobs.append(job)
    return jobs


def make_bids(user, count: int) -> None:
    chips = list(ChipType.objects.all())
    for n, job in enumerate(make_jobs(user, count)):
        Bid.objects.create(
            owner=user,
            job=job,
            chip_type=chips[n % len(chips)],
            chips=1,
            max_price_per_hour=to_micros("1"),
            status=BidStatus.CLOSED,
            placed_at=timezone.now(),
        )


def make_ledger(user, count: int) -> None:
    for n in range(count):
        adjust_credit(user, to_micros("1"), reason="test credit", actor=None, key=f"scale:{user.pk}:{n}")


def queries_of(api, path: str) -> list[str]:
    api.get(path)  # warm: the token's lookup is cached, as it is for every request after a client's first
    with CaptureQueriesContext(connection) as captured:
        response = api.get(path)
    assert response.status_code == 200, response.content
    return [query["sql"] for query in captured.captured_queries]


MAKERS = {"/api/v1/jobs/": make_jobs, "/api/v1/bids/": make_bids, "/api/v1/ledger/": make_ledger}


@pytest.mark.parametrize("path", list(MAKERS))
def test_a_list_of_30_costs_no_more_queries_than_a_list_of_1(path, catalog, make_user, token_for):
    one, thirty = make_user("one"), make_user("thirty")
    MAKERS[path](one, 1)
    MAKERS[path](thirty, 30)
    few = queries_of(client_with(token_for(one)), path)
    many_api = client_with(token_for(thirty))
    many = queries_of(many_api, path)
    assert len(many_api.get(path).json()["results"]) == 30
    assert len(many) <= len(few), "\n".join(many)


@pytest.mark.parametrize("path", list(MAKERS))
def test_a_list_that_fits_on_one_page_is_not_counted(path, catalog, alice, token_for):
    MAKERS[path](alice, 3)
    sql = queries_of(client_with(token_for(alice)), path)
    assert not [query for query in sql if "COUNT(" in query.upper()], sql


def test_the_jobs_list_is_newest_first(alice, token_for):
    jobs = make_jobs(alice, 3)
    listed = client_with(token_for(alice)).get("/api/v1/jobs/").json()["results"]
    assert [job["id"] for job in listed] == [job.pk for job in reversed(jobs)]


def test_page_size_picks_the_page_and_next_walks_every_item_once(alice, token_for):
    make_ledger(alice, 7)
    api = client_with(token_for(alice))
    first = api.get("/api/v1/ledger/?page_size=3").json()
    assert (first["count"], len(first["results"]), first["previous"]) == (7, 3, None)
    assert "page=2" in first["next"] and "page_size=3" in first["next"]
    seen, page = [], first
    while True:
        seen += [entry["id"] for entry in page["results"]]
        if not page["next"]:
            break
        page = api.get(page["next"]).json()
        assert page["count"] == 7
    assert len(seen) == len(set(seen)) == 7
    assert "page=2" in page["previous"]


@pytest.mark.parametrize("bad", ["0", "-1", "x", "10000", "201", "²", "1.5"])
def test_a_bad_page_size_is_a_400_naming_it(bad, alice, token_for):
    response = client_with(token_for(alice)).get("/api/v1/ledger/", {"page_size": bad})
    assert response.status_code == 400
    assert "page_size" in response.json()["errors"]


def test_the_largest_page_size_is_accepted(alice, token_for):
    assert client_with(token_for(alice)).get("/api/v1/ledger/?page_size=200").status_code == 200


def test_a_page_past_the_end_is_404(alice, token_for):
    make_ledger(alice, 2)
    assert client_with(token_for(alice)).get("/api/v1/ledger/?page=2").status_code == 404


def test_count_is_bounded_on_a_page_with_more_after_it_and_exact_on_the_last(alice, token_for, monkeypatch):
    monkeypatch.setattr(BoundedPageNumberPagination, "count_bound", 5)
    make_ledger(alice, 12)
    api = client_with(token_for(alice))
    assert api.get("/api/v1/ledger/?page_size=2").json()["count"] == 5  # "at least 5": counted up to the bound
    last = api.get("/api/v1/ledger/?page_size=2&page=6").json()
    assert (last["count"], last["next"], len(last["results"])) == (12, None, 2)


def test_the_schema_states_the_page_size_bounds(api_for, alice):
    schema = api_for(alice).get("/api/v1/schema/?format=json").json()
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert parameters["page_size"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 200}


# The token lookup cache ---------------------------------------------------------------------------


def token_queries(api) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert api.get("/api/v1/account/").status_code == 200
    return [q["sql"] for q in captured.captured_queries if "portal_apitoken" in q["sql"]]


def test_a_used_token_is_looked_up_from_the_cache(alice, token_for):
    api = client_with(token_for(alice))
    assert token_queries(api)  # the first request reads it (and records its use)
    assert token_queries(api) == []


def test_revoking_through_the_api_stops_a_cached_token_at_once(alice):
    token, raw = ApiToken.issue(alice)
    api = client_with(raw)
    assert api.get("/api/v1/account/").status_code == 200
    assert api.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    assert api.get("/api/v1/account/").status_code == 401


def test_revoking_on_the_dashboard_stops_a_cached_token_at_once(alice, client):
    client.force_login(alice)
    token, raw = ApiToken.issue(alice)
    api = client_with(raw)
    assert api.get("/api/v1/account/").status_code == 200
    client.post(reverse("token_revoke", args=[token.pk]))
    assert api.get("/api/v1/account/").status_code == 401


def test_a_cached_token_stops_at_its_expiry(alice):
    _, raw = ApiToken.issue(alice, expires_at=timezone.now() + timedelta(minutes=1))
    api = client_with(raw)
    assert api.get("/api/v1/account/").status_code == 200
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        response = api.get("/api/v1/account/")
    assert response.status_code == 401
    assert response.json() == {"detail": "This API token has expired."}


def test_disabling_the_user_stops_a_cached_token_at_once(alice, token_for):
    api = client_with(token_for(alice))
    assert api.get("/api/v1/account/").status_code == 200
    alice.is_active = False
    alice.save()
    assert api.get("/api/v1/account/").status_code == 401


def test_deleting_a_token_stops_it_at_once(alice):
    token, raw = ApiToken.issue(alice)
    api = client_with(raw)
    assert api.get("/api/v1/account/").status_code == 200
    token.delete()
    assert api.get("/api/v1/account/").status_code == 401


# The chip list's optional per-process copy ----------------------------------------------------------


def test_the_chip_list_is_computed_on_every_request_by_default(api_for, alice, catalog):
    api = api_for(alice)
    api.get("/api/v1/chips/")
    with CaptureQueriesContext(connection) as captured:
        assert len(api.get("/api/v1/chips/").json()) == ChipType.objects.count()
    assert [q for q in captured.captured_queries if "workers_chiptype" in q["sql"]]


def test_with_a_chips_cache_the_list_is_read_once_then_kept(api_for, alice, catalog, settings, monkeypatch):
    from portal.api import views

    monkeypatch.setitem(views._chips_memo, "at", float("-inf"))
    settings.API_CHIPS_CACHE_SECONDS = 60
    api = api_for(alice)
    first = api.get("/api/v1/chips/").json()
    with CaptureQueriesContext(connection) as captured:
        assert api.get("/api/v1/chips/").json() == first
    assert not [q for q in captured.captured_queries if "workers_chiptype" in q["sql"]]


def test_a_due_chip_list_is_computed_by_one_thread_while_the_others_answer_the_last_one(settings, monkeypatch):
    import threading

    from portal.api import views

    settings.API_CHIPS_CACHE_SECONDS = 60
    monkeypatch.setitem(views._chips_memo, "at", float("-inf"))
    monkeypatch.setitem(views._chips_memo, "data", ["the last list"])
    computing, release, computed = threading.Event(), threading.Event(), []

    def slow_list():
        computed.append(threading.current_thread().name)
        computing.set()
        release.wait(10)
        return ["the next list"]

    monkeypatch.setattr(views, "_chip_list_now", slow_list)
    first = threading.Thread(target=views.chip_list, name="first")
    first.start()
    assert computing.wait(10)
    answers = [views.chip_list() for _ in range(5)]  # meanwhile: no second computation, the last list
    release.set()
    first.join(10)
    assert computed == ["first"]
    assert answers == [["the last list"]] * 5
    assert views.chip_list() == ["the next list"]
