"""The API's errors in the request's language (#33): every `detail` and per-field message of a zh-CN request is
Chinese, its `code` and field names stay English; in English nothing changes; datetimes stay UTC."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from base.models import Preferences
from fleet.choices import JobStatus
from fleet.models import Job
from portal.models import TokenScope
from tests.portal.i18n.visible_text import needs_translation
from tests.support.deployments import DEPLOYMENT
from tests.support.jobs import JOB_SPEC

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
# The data's own names and the API's words a Chinese message keeps: fields, chip slugs, model references.
NAMES = (
    "gpt-9",
    "llama-tiny",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "model:<id>",
    "job:<id>",
    "org/name",
    "rtx-4090",
    "max_budget",
    "max_steps",
    "max_budget_jet",
    "per_device_batch_size",
    "/api/v1/nothing/",
    "/api/v1/docs/",
    "Bearer",
)


@pytest.fixture
def alice_api(alice, fund, api_for, enroll, no_celery):
    """Alice with credit and a token; one simulated RTX 4090 online (launched jobs stay queued)."""
    fund(alice)
    enroll("i18n-4090", "rtx-4090")
    return api_for(alice)


def a_job(owner, **fields) -> Job:
    return Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        **fields,
    )  # fmt: skip


def bad_requests(api: APIClient, alice, anonymous: APIClient, read_only: APIClient) -> dict:
    """Representative refusals: name -> (response, expected status, expected code or None)."""
    job = a_job(alice)
    running = a_job(alice, status=JobStatus.RUNNING)
    return {
        "validation": (lambda h: api.post("/api/v1/jobs/", {**JOB_SPEC, "model": "gpt-9", "max_steps": 0}, **h), 400),
        "unknown field": (lambda h: api.post("/api/v1/jobs/", {**JOB_SPEC, "max_budget_jet": "1"}, **h), 400),
        "budget too low": (lambda h: api.post("/api/v1/jobs/", {**JOB_SPEC, "max_budget": "0.01"}, **h), 400),
        "total budget too low": (
            lambda h: api.post("/api/v1/quotes/", {**JOB_SPEC, "total_budget": "0.000001"}, **h),
            400,
        ),
        "not found": (lambda h: api.get("/api/v1/jobs/999999/", **h), 404),
        "no endpoint": (lambda h: api.get("/api/v1/nothing/", **h), 404),
        "no token": (lambda h: anonymous.get("/api/v1/jobs/", **h), 401),
        "bad token": (lambda h: anonymous.get("/api/v1/jobs/", HTTP_AUTHORIZATION="Bearer sv_nonsense", **h), 401),
        "read-only": (lambda h: read_only.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, **h), 403),
        "deployment": (lambda h: api.post("/api/v1/deployments/", {**DEPLOYMENT, "model": "llama-tiny"}, **h), 400),
        "bid": (lambda h: api.post("/api/v1/bids/", {"job": job.pk, "chip": "rtx-4090", "chips": 1, "max_price": "1"},
                                   **h), 400),
        "conflict": (lambda h: api.post(f"/api/v1/jobs/{running.pk}/continue/", {}, **h), 409),
        "wrong password": (
            lambda h: anonymous.post("/api/v1/tokens/", {"username": "alice", "password": "wrong"}, **h),
            401,
        ),
    }  # fmt: skip


def messages_of(body: dict) -> list[str]:
    """The detail and every per-field message of an error body."""
    found = [body["detail"]]
    for messages in (body.get("errors") or {}).values():
        found += [str(message) for message in (messages if isinstance(messages, list) else [messages])]
    return found


@pytest.fixture
def clients(alice, alice_api, api_for):
    for client in (alice_api,):
        client.default_format = "json"
    read_only = api_for(alice, scope=TokenScope.READ_ONLY)
    read_only.default_format = "json"
    anonymous = APIClient()
    anonymous.default_format = "json"
    return alice_api, anonymous, read_only


def test_every_refusal_is_in_chinese_for_a_chinese_request_with_its_code_and_fields_in_english(alice, clients):
    api, anonymous, read_only = clients
    requests = bad_requests(api, alice, anonymous, read_only)
    for name, (send, status) in requests.items():
        english = send(EN)
        chinese = send(ZH)
        assert (english.status_code, chinese.status_code) == (status, status), (name, chinese.json())
        zh, en = chinese.json(), english.json()
        assert zh.get("code") == en.get("code"), name
        assert set(zh.get("errors") or {}) == set(en.get("errors") or {}), name
        untranslated = [text for text in messages_of(zh) if needs_translation(text, also_allowed=NAMES)]
        assert untranslated == [], (name, zh)
        assert any(needs_translation(text, also_allowed=NAMES) for text in messages_of(en)), (name, en)  # English


def test_the_refusals_a_client_acts_on_keep_their_codes(alice, clients):
    api, anonymous, read_only = clients
    requests = bad_requests(api, alice, anonymous, read_only)
    codes = {name: requests[name][0](ZH).json().get("code") for name in ("budget too low", "deployment", "conflict")}
    assert codes == {
        "budget too low": "budget_too_low",
        "deployment": "model_not_servable",
        "conflict": "job_not_finished",
    }


def test_english_requests_read_as_before(alice, clients):
    api, anonymous, read_only = clients
    requests = bad_requests(api, alice, anonymous, read_only)
    body = requests["budget too low"][0](EN).json()
    assert body["detail"] == "Invalid input: max_budget."
    assert body["errors"]["max_budget"][0].startswith("The hourly budget ¥0.01/h is below the cheapest plan that fits")
    assert requests["read-only"][0](EN).json() == {"detail": "This API token is read-only."}
    body = requests["deployment"][0]({}).json()
    assert body["errors"]["model"][0].startswith("'llama-tiny' is a built-in model: it reads raw bytes")
    body = requests["bid"][0]({}).json()
    assert body["errors"]["job"] == [
        f"Job {Job.objects.order_by('pk').first().pk} is not a spot job; only spot jobs bid for spot chips."
    ]


def test_a_token_answers_in_its_owners_saved_language_without_accept_language(alice, alice_api):
    Preferences.objects.create(user=alice, language="zh-hans")
    body = alice_api.post("/api/v1/jobs/", {**JOB_SPEC, "max_budget": "0.01"}, format="json").json()
    assert body["code"] == "budget_too_low"
    assert body["detail"] == "输入无效：max_budget。"
    assert "每小时预算" in body["errors"]["max_budget"][0]
    Preferences.objects.filter(user=alice).update(language="en")  # no save(): the cached token keeps zh-hans
    Preferences.objects.get(user=alice).save()  # a saved change reaches the token at once
    english = alice_api.post("/api/v1/jobs/", {**JOB_SPEC, "max_budget": "0.01"}, format="json", **ZH).json()
    assert english["detail"] == "Invalid input: max_budget."


def test_api_datetimes_stay_utc_whatever_the_owners_zone(alice, alice_api):
    Preferences.objects.create(user=alice, language="zh-hans", time_zone="Asia/Shanghai")
    job = a_job(alice)
    body = alice_api.get(f"/api/v1/jobs/{job.pk}/", **ZH).json()
    assert body["created_at"].endswith(("Z", "+00:00")), body["created_at"]
    assert alice_api.get("/api/v1/tokens/", **ZH).json()["results"][0]["created_at"].endswith("Z")
