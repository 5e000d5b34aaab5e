"""Throttles answer 429 in the API's error format; parallel bad logins still lock an account.

docs/RELIABILITY.md #22.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from portal.api.throttling import UserThrottle
from portal.models import ApiToken
from tests.support.accounts import PASSWORD, client_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_counters():
    """Throttle and lockout counters live in the cache; start each test from none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def rates(settings):
    def set_rates(**changed) -> None:
        framework = settings.REST_FRAMEWORK
        settings.REST_FRAMEWORK = {
            **framework,
            "DEFAULT_THROTTLE_RATES": {**framework["DEFAULT_THROTTLE_RATES"], **changed},
        }

    return set_rates


def test_a_user_past_the_rate_gets_429_with_retry_after(rates, alice, token_for):
    rates(user="3/min")
    api = client_with(token_for(alice))

    codes = [api.get("/api/v1/account/").status_code for _ in range(4)]

    assert codes == [200, 200, 200, 429]
    refused = api.get("/api/v1/account/")
    assert set(refused.json()) == {"detail"} and "throttled" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) > 0


def test_the_rate_is_per_user(rates, alice, bob, token_for):
    rates(user="2/min")
    alices, bobs = client_with(token_for(alice)), client_with(token_for(bob))
    for _ in range(2):
        alices.get("/api/v1/account/")

    assert alices.get("/api/v1/account/").status_code == 429
    assert bobs.get("/api/v1/account/").status_code == 200


def test_anonymous_callers_are_throttled_by_address(rates, catalog):
    rates(anon="2/min")
    api = APIClient()

    assert [api.get("/api/v1/chips/").status_code for _ in range(3)] == [200, 200, 429]


def test_a_forged_forwarded_for_header_does_not_reset_the_address_limit(rates, catalog):
    rates(anon="2/min")
    api = APIClient()

    codes = [api.get("/api/v1/chips/", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}").status_code for n in range(3)]

    assert codes == [200, 200, 429]


def test_behind_our_proxy_the_address_it_forwards_is_the_callers(rates, catalog, settings):
    rates(anon="2/min")
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    api = APIClient()

    first = [api.get("/api/v1/chips/", HTTP_X_FORWARDED_FOR="203.0.113.7").status_code for _ in range(3)]
    other = api.get("/api/v1/chips/", HTTP_X_FORWARDED_FOR="203.0.113.8").status_code

    assert first == [200, 200, 429] and other == 200


def bad_logins_at_once(count: int, username: str) -> list[int]:
    barrier = Barrier(count)

    def attempt(_):
        barrier.wait()
        try:
            return Client().post("/accounts/login/", {"login": username, "password": "wrong-guess"}).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(attempt, range(count)))


def test_twenty_parallel_bad_logins_lock_the_account_on_the_page_and_the_api(alice):
    bad_logins_at_once(20, "alice")

    page = Client().post("/accounts/login/", {"login": "alice", "password": PASSWORD})
    assert page.status_code != 302 and "_auth_user_id" not in page.client.session
    assert "Too many failed login attempts" in page.content.decode()

    token = APIClient().post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")
    assert token.status_code == 429 and "Too many failed sign-in attempts" in token.json()["detail"]
    assert not ApiToken.objects.exists()


def test_bad_token_requests_count_toward_the_same_lockout(alice):
    api = APIClient()
    for _ in range(5):
        assert api.post("/api/v1/tokens/", {"username": "alice", "password": "nope"}, format="json").status_code == 401

    page = Client().post("/accounts/login/", {"login": "alice", "password": PASSWORD})

    assert "_auth_user_id" not in page.client.session


def test_a_good_login_after_a_few_mistakes_still_works(alice):
    api = APIClient()
    for _ in range(2):
        api.post("/api/v1/tokens/", {"username": "alice", "password": "nope"}, format="json")

    response = api.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")

    assert response.status_code == 201


# The count behind the throttles: per window of the rate's period, the previous window weighted by its overlap.

WINDOW_START = 60 * 29_000_000  # a minute boundary


def asks_at(at: float, user, times: int = 1) -> list[bool]:
    """`times` requests of `user` at time `at`, each judged by a fresh throttle (as DRF makes one per request)."""
    answers = []
    for _ in range(times):
        throttle = UserThrottle()
        throttle.timer = lambda: at
        answers.append(throttle.allow_request(SimpleNamespace(user=user), view=None))
    return answers


def test_a_full_last_minute_weighs_on_the_next_as_it_ages(rates, alice):
    rates(user="10/min")
    assert asks_at(WINDOW_START + 59, alice, 11) == [True] * 10 + [False]

    # 6 s into the next minute, 90% of the last one still counts: 9 + this one fits, one more does not.
    assert asks_at(WINDOW_START + 66, alice, 2) == [True, False]
    # Half way through, half of it: room for 4 more beside the one already let in.
    assert asks_at(WINDOW_START + 90, alice, 5) == [True] * 4 + [False]


def test_refused_requests_do_not_count_and_retry_after_names_when_one_fits(rates, alice):
    rates(user="10/min")
    asks_at(WINDOW_START + 59, alice, 10)
    assert asks_at(WINDOW_START + 59, alice, 50) == [False] * 50

    throttle = UserThrottle()
    throttle.timer = lambda: WINDOW_START + 59
    assert not throttle.allow_request(SimpleNamespace(user=alice), view=None)
    assert throttle.wait() == pytest.approx(7)  # 1 s to the next minute, then 6 s for 10% of this one to age out
    assert asks_at(WINDOW_START + 65.9, alice) == [False]
    assert asks_at(WINDOW_START + 66, alice) == [True]  # the 50 refused ones were not counted


def test_throttles_count_with_another_cache_backend_too(rates, alice, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    rates(user="10/min")

    assert asks_at(WINDOW_START + 59, alice, 12) == [True] * 10 + [False, False]
    assert asks_at(WINDOW_START + 66, alice, 2) == [True, False]
