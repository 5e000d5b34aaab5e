"""Who may see and do what through the API (docs/RELIABILITY.md #19 to #21): every list and detail is the owner's.

Table-driven: each kind of object is one row (how to make one for a user, its list URL, its detail
URLs). Bob asks for Alice's ids everywhere and gets 404s and lists without them.
"""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import Entry
from fleet.models import ChipType, Dataset, Deployment, Job, UploadedModel
from market.models import Bid
from portal.models import ApiToken
from tests.support.accounts import client_with
from tests.support.jobs import JOB_SPEC as SPEC

pytestmark = pytest.mark.django_db


def make_job(user) -> int:
    return Job.objects.create(
        owner=user, name="private", model_name="llama-tiny", per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000,
    ).pk  # fmt: skip


def make_dataset(user) -> int:
    return Dataset.objects.create(
        owner=user,
        name="private",
        kind="text",
        store_prefix=f"datasets/{user.pk}/private",
        file_name="data.txt",
        size_bytes=1,
        samples=1,
    ).pk


def make_model(user) -> int:
    return UploadedModel.objects.create(
        owner=user, name="private", architecture="llama", parameters=1, size_bytes=1, config={"model_type": "llama"},
        shape={"parameters": 1, "linears": {}}, store_prefix=f"models/{user.pk}/private",
    ).pk  # fmt: skip


def make_deployment(user) -> int:
    return Deployment.objects.create(
        owner=user, name="private", model_name=f"model:{make_model(user)}", max_budget_per_hour=28_000_000,
        min_replicas=0,
    ).pk  # fmt: skip


def make_token(user) -> int:
    return ApiToken.issue(user, name="private")[0].pk


def make_bid(user) -> int:
    return Bid.objects.create(
        owner=user, job_id=make_job(user), chip_type=ChipType.objects.get(slug="tpu-v5e"), chips=1,
        max_price_per_hour=2_000_000, placed_at=timezone.now(),
    ).pk  # fmt: skip


def make_ledger_entry(user) -> int:
    return Entry.objects.filter(account__owner=user).latest("id").pk


JOB_DETAILS = [
    "jobs/{id}/", "jobs/{id}/metrics/", "jobs/{id}/events/", "jobs/{id}/logs/", "jobs/{id}/artifacts/",
    "jobs/{id}/model/",
]  # fmt: skip
# (name, make one for a user -> id, list URL, detail URLs to GET, writes to try: (method, URL, body))
OBJECTS = [
    ("job", make_job, "jobs/", JOB_DETAILS, [("post", "jobs/{id}/cancel/", None)]),
    ("dataset", make_dataset, "datasets/", ["datasets/{id}/"], [("delete", "datasets/{id}/", None)]),
    ("model", make_model, "models/", ["models/{id}/"], [("delete", "models/{id}/", None)]),
    ("token", make_token, "tokens/", [], [("delete", "tokens/{id}/", None)]),
    ("deployment", make_deployment, "deployments/", ["deployments/{id}/"],
     [("patch", "deployments/{id}/", {"min_replicas": 1}), ("delete", "deployments/{id}/", None)]),
    ("bid", make_bid, "bids/", ["bids/{id}/"],
     [("patch", "bids/{id}/", {"max_price": "9"}), ("post", "bids/{id}/cancel/", None)]),
    ("ledger entry", make_ledger_entry, "ledger/", [], []),
]  # fmt: skip


@pytest.fixture
def alices(catalog, alice, fund):
    fund(alice)
    return alice


@pytest.fixture
def bob_api(bob, fund, api_for):
    fund(bob)
    return api_for(bob)


def ids_in(body) -> set[int]:
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    return {row["id"] for row in rows}


@pytest.mark.parametrize(("name", "make", "list_url", "details", "writes"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_another_users_objects_are_404_and_absent_from_lists(alices, bob_api, name, make, list_url, details, writes):
    theirs = make(alices)

    listed = bob_api.get(f"/api/v1/{list_url}")
    assert listed.status_code == 200
    assert theirs not in ids_in(listed.json()), f"Alice's {name} is in Bob's list"
    for url in details:
        response = bob_api.get(f"/api/v1/{url.format(id=theirs)}")
        assert response.status_code == 404, f"GET {url}: {response.status_code}"
    for method, url, body in writes:
        response = getattr(bob_api, method)(f"/api/v1/{url.format(id=theirs)}", body, format="json")
        assert response.status_code == 404, f"{method.upper()} {url}: {response.status_code}"


def test_nobody_trains_on_another_users_model(alices, bob_api):
    reference = f"model:{make_model(alices)}"
    for path in ("quotes/", "jobs/"):
        response = bob_api.post(f"/api/v1/{path}", {**SPEC, "model": reference}, format="json")
        assert response.status_code == 400 and "model" in response.json()["errors"], response.json()
    assert not Job.objects.filter(model_name=reference).exists()


def test_another_users_artifact_download_is_404(alices, bob_api):
    job_id = make_job(alices)
    assert bob_api.get(f"/api/v1/jobs/{job_id}/artifacts/final/model.pt").status_code == 404


def test_usage_counts_only_your_own_charges(alices, bob_api):
    usage = bob_api.get("/api/v1/usage/?group=job").json()
    assert usage["rows"] == [] and usage["total"] == "0.00"


def test_a_job_on_another_users_dataset_is_refused(alices, bob, bob_api, small_fleet):
    dataset_id = make_dataset(alices)
    response = bob_api.post("/api/v1/jobs/", {**SPEC, "dataset": f"upload:{dataset_id}"}, format="json")
    assert response.status_code == 400 and "dataset" in response.json()["errors"]


def test_a_bid_for_another_users_job_is_refused(alices, bob_api):
    response = bob_api.post(
        "/api/v1/bids/", {"job": make_job(alices), "chip": "tpu-v5e", "chips": 1, "max_price": "5"}, format="json"
    )
    assert response.status_code == 400 and "job" in response.json()["errors"]
    assert not Bid.objects.exists()


# -- fields a user must not set (docs/RELIABILITY.md #20) -------------------------------------


def test_job_fields_a_user_must_not_set_are_ignored(alice, fund, api_for, small_fleet, no_celery, bob):
    fund(alice)
    body = {**SPEC, "status": "succeeded", "owner": bob.pk, "cost": "0", "step": 99, "plan": {"ranks": []}}

    response = api_for(alice).post("/api/v1/jobs/", body, format="json")

    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.owner, job.status, job.step, job.plan) == (alice, "queued", 0, None)


def test_a_price_in_a_job_spec_is_refused_by_name(alice, fund, api_for, small_fleet, no_celery):
    fund(alice)

    response = api_for(alice).post("/api/v1/jobs/", {**SPEC, "price_per_hour": "0.01"}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "unknown_field" and "price_per_hour" in response.json()["errors"]
    assert not Job.objects.exists()


def test_the_balance_cannot_be_set_through_the_api(alice, fund, api_for):
    fund(alice, "5")
    api = api_for(alice)

    for method in ("put", "patch", "post"):
        response = getattr(api, method)("/api/v1/account/", {"balance": "1000000"}, format="json")
        assert response.status_code == 405
    assert api.get("/api/v1/account/").json()["balance"] == "5.00"


def test_a_token_cannot_be_created_for_someone_else(alice, bob):
    response = APIClient().post(
        "/api/v1/tokens/",
        {"username": "alice", "password": "correct-horse-battery-staple", "user": bob.pk},
        format="json",
    )
    assert response.status_code == 400 and "user" in response.json()["errors"]
    assert not ApiToken.objects.exists()


# -- kinds of token (docs/RELIABILITY.md #21) -------------------------------------------------

USER_WRITES = [
    ("post", "/api/v1/jobs/", SPEC),
    ("post", "/api/v1/quotes/", SPEC),
    ("post", "/api/v1/topups/", {"amount": "50.00"}),
    pytest.param(
        "post",
        "/api/v1/bids/",
        {"job": 1, "chip": "tpu-v5e", "chips": 1, "max_price": "5"},
    ),
]
WRITE_IDS = ["jobs", "quotes", "topups", "bids"]
ALL_WRITES = [*USER_WRITES[:3], ("post", "/api/v1/bids/", {"job": 1, "chip": "tpu-v5e", "chips": 1, "max_price": "5"})]


@pytest.mark.parametrize(("method", "url", "body"), USER_WRITES, ids=WRITE_IDS)
def test_a_read_only_token_is_refused_on_writes(alice, fund, token_for, small_fleet, method, url, body):
    fund(alice)
    api = client_with(token_for(alice, scope="read_only"))

    response = getattr(api, method)(url, body, format="json")

    assert response.status_code == 403, response.content
    assert response.json() == {"detail": "This API token is read-only."}
    assert not Job.objects.exists() and not Bid.objects.exists()


@pytest.mark.parametrize(("method", "url", "body"), ALL_WRITES, ids=WRITE_IDS)
def test_an_expired_token_is_refused_on_writes(alice, fund, token_for, small_fleet, method, url, body):
    fund(alice)
    api = client_with(token_for(alice, expired=True))

    response = getattr(api, method)(url, body, format="json")

    assert response.status_code == 401
    assert response.json() == {"detail": "This API token has expired."}


def test_a_read_only_token_still_reads(alice, token_for):
    api = client_with(token_for(alice, scope="read_only"))
    assert api.get("/api/v1/jobs/").status_code == 200
    assert api.get("/api/v1/account/").status_code == 200


@pytest.mark.parametrize("url", ["/api/v1/account/", "/api/v1/jobs/", "/api/v1/ledger/", "/api/v1/bids/"])
def test_a_node_token_cannot_call_user_endpoints(small_fleet, url):
    api = client_with(small_fleet["a-4090"])
    assert api.get(url).status_code == 401


@pytest.mark.parametrize("url", ["/api/v1/agent/poll/", "/api/v1/agent/report/"])
def test_a_user_token_cannot_call_agent_endpoints(alice, token_for, url):
    api = client_with(token_for(alice))
    response = api.post(url, {}, format="json")
    assert response.status_code == 401
    assert "node token" in response.json()["detail"]
