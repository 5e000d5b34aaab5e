"""The crafted inputs that gave 500s (or HTML), one by one: each is now a JSON 4xx in the error format.

NUL characters in the query, the path and multipart fields; "upload:²" (a superscript passes
str.isdigit()); impossible dates; 5,000-deep JSON, in a body or a dataset's line; a page number past
PostgreSQL's bigint or int()'s 4,300 digits; the documented maximum 1000000 refused; bodies too large
for Django answered with an HTML 400. Several without a token, as the probes were.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from fleet.models import Dataset, Job
from hosts.agent.output import capped_lines
from tests.support.jobs import JOB_SPEC

pytestmark = pytest.mark.django_db

DEEP_LIST = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000
TOO_BIG = json.dumps({"username": "x" * (3 * 1024 * 1024), "password": "x"})
DEEP_LINE = SimpleUploadedFile("deep.jsonl", ('{"text": "a", "x": ' + DEEP_LIST + "}\n").encode())
SURROGATE_LINE = SimpleUploadedFile("lone.jsonl", b'{"text": "\\ud800"}\n')

# (what, signed in?, method, URL, body (JSON text, or a dict for a multipart form), the field named or None)
PROBES = [
    ("NUL in a query parameter", False, "get", "/api/v1/prices/history/?chip=%00", None, "chip"),
    ("NUL in a query parameter", True, "get", "/api/v1/jobs/?status=%00", None, "status"),
    ("NUL in a query parameter", True, "get", "/api/v1/bids/?status=%00", None, "status"),
    ("NUL in a query parameter's name", True, "get", "/api/v1/ledger/?a%00=1", None, "a\\u0000"),
    ("NUL in the path", False, "get", "/api/v1/pools/%00/", None, "path"),
    ("NUL in the path", True, "get", "/api/v1/jobs/{job}/artifacts/%00", None, "path"),
    ("NUL in a multipart field", True, "post", "/api/v1/datasets/", {"name": "x\x00y"}, "name"),
    ("NUL in a JSON key", True, "post", "/api/v1/quotes/", {**JOB_SPEC, "chip_counts": {"\x00": 1}}, "chip_counts"),
    ("a superscript as a dataset id", True, "post", "/api/v1/jobs/", {**JOB_SPEC, "dataset": "upload:²"}, "dataset"),
    ("a superscript as a dataset id", True, "post", "/api/v1/quotes/", {**JOB_SPEC, "dataset": "upload:²"}, "dataset"),
    ("an impossible date", False, "get", "/api/v1/prices/history/?chip=rtx-4090&since=2024-02-30T00:00", None, "since"),
    ("an impossible date", False, "get", "/api/v1/prices/history/?chip=rtx-4090&since=2024-13-45T00:00", None, "since"),
    ("an impossible date", True, "get", "/api/v1/usage/?since=2024-02-30", None, "since"),
    ("5,000-deep JSON", False, "post", "/api/v1/tokens/", DEEP_LIST, "non_field_errors"),
    ("5,000-deep JSON", True, "post", "/api/v1/jobs/", DEEP_OBJECT, "non_field_errors"),
    ("a lone surrogate in a JSON key", True, "post", "/api/v1/quotes/", '{"\\ud800": 1}', "\\ud800"),
    ("a body over Django's limit", False, "post", "/api/v1/tokens/", TOO_BIG, None),
    ("a body over Django's limit", True, "post", "/api/v1/datasets/", {"name": "x" * (3 * 1024 * 1024)}, None),
    ("too many form fields", True, "post", "/api/v1/datasets/", {f"f{i}": "" for i in range(1200)}, "non_field_errors"),
    *[
        ("a page past PostgreSQL's bigint", True, "get", f"{url}{'&' if '?' in url else '?'}page={n}", None, None)
        for url in ["/api/v1/jobs/", "/api/v1/datasets/", "/api/v1/bids/", "/api/v1/ledger/", "/api/v1/tokens/",
                    "/api/v1/pools/", "/api/v1/prices/history/?chip=rtx-4090"]
        for n in ["99999999999999999999", str(2**62)]
    ],
    ("a page number of 5,000 digits (past int()'s limit)", True, "get", f"/api/v1/jobs/?page={'9' * 5000}", None, None),
    ("a page size of 5,000 digits", True, "get", f"/api/v1/jobs/?page_size={'9' * 5000}", None, "page_size"),
    ("a dataset line of 5,000-deep JSON", True, "post", "/api/v1/datasets/", {"file": DEEP_LINE}, "file"),
    ("a dataset line with a lone surrogate", True, "post", "/api/v1/datasets/", {"file": SURROGATE_LINE}, "file"),
]  # fmt: skip


@pytest.fixture
def alices_job(alice) -> Job:
    return Job.objects.create(
        owner=alice, name="mine", model_name="llama-tiny", per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000,
    )  # fmt: skip


def send(client: Client, method: str, url: str, body):
    if body is None:
        return getattr(client, method)(url)
    if isinstance(body, str):
        return client.post(url, body, content_type="application/json")
    if "datasets" in url:
        return client.post(url, body)  # multipart, as a file upload is sent
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    ("what", "signed_in", "method", "url", "body", "field"),
    PROBES,
    ids=[f"{p[0]}: {p[2]} {p[3][:60]}" for p in PROBES],
)
def test_a_crafted_input_is_a_json_4xx_in_the_error_format(
    what,
    signed_in,
    method,
    url,
    body,
    field,
    catalog,
    alice,
    fund,
    token_for,
    alices_job,
):
    fund(alice)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(alice)}"} if signed_in else {}
    client = Client(raise_request_exception=False, **headers)

    response = send(client, method, url.format(job=alices_job.pk), body)

    assert 400 <= response.status_code < 500, (what, response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), (what, response["Content-Type"])
    error = response.json()
    assert error["detail"]
    if response.status_code == 400:
        assert {"detail", "code", "errors"} <= set(error), error
    if field is not None:
        assert field in error["errors"], (what, error)


def test_a_body_over_djangos_limit_is_a_413_that_says_so(alice):
    response = Client().post("/api/v1/tokens/", TOO_BIG, content_type="application/json")

    assert response.status_code == 413
    assert "too large" in response.json()["detail"]


@pytest.mark.parametrize("url", ["/billing/topups/%00/", "/jobs/1/artifacts/%00", "/accounts/login/?next=%00"])
def test_a_nul_in_a_page_url_is_a_plain_400(alice, url):
    client = Client(raise_request_exception=False)
    client.force_login(alice)

    response = client.get(url)

    assert response.status_code == 400
    assert "Null characters" in response.content.decode()


@pytest.mark.parametrize("path", ["/api/v1/quotes/", "/api/v1/jobs/"])
@pytest.mark.parametrize("field", ["max_budget", "bid"])
def test_the_documented_maximum_price_is_accepted(alice, fund, token_for, small_fleet, no_celery, path, field):
    fund(alice, "10000000")
    spec = {**JOB_SPEC, "max_budget": "1000000"}
    if field == "bid":
        spec.update(spot=True, bid="1000000")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(alice)}")

    response = client.post(path, json.dumps(spec), content_type="application/json")

    assert response.status_code in (200, 201), response.json()
    assert field not in response.json().get("errors", {})


def test_the_documented_maximums_of_bids_are_accepted_and_one_micro_more_is_not(alice, token_for, alices_job):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(alice)}")
    bid = {"job": alices_job.pk, "chip": "rtx-4090", "chips": 1}

    at_max = client.post("/api/v1/bids/", json.dumps({**bid, "max_price": "1000000"}), content_type="application/json")
    over = client.post(
        "/api/v1/bids/", json.dumps({**bid, "max_price": "1000000.000001"}), content_type="application/json"
    )

    assert "max_price" not in at_max.json().get("errors", {}), at_max.json()
    assert over.json()["errors"]["max_price"] == ["Ensure this value is less than or equal to 1000000."]


def test_a_dataset_reference_takes_ascii_digits_only(alice, token_for):
    dataset = Dataset.objects.create(
        owner=alice,
        name="d",
        kind="text",
        store_prefix=f"datasets/{alice.pk}/d",
        file_name="data.txt",
        size_bytes=1,
        samples=1,
    )
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(alice)}")
    arabic_indic = "upload:" + "".join("٠١٢٣٤٥٦٧٨٩"[int(d)] for d in str(dataset.pk))

    response = client.post(
        "/api/v1/quotes/", json.dumps({**JOB_SPEC, "dataset": arabic_indic}), content_type="application/json"
    )

    assert "dataset" in response.json()["errors"]


def test_a_nul_in_an_uploaded_dataset_name_is_refused_and_nothing_is_stored(alice, token_for):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(alice)}")
    upload = SimpleUploadedFile("a.txt", b"hello world\nmore text\n", content_type="text/plain")

    response = client.post("/api/v1/datasets/", {"file": upload, "name": "bad\x00name"})

    assert response.status_code == 400 and response.json()["code"] == "null_characters_not_allowed"
    assert not Dataset.objects.exists()


def test_a_nul_a_rank_prints_travels_as_a_replacement_character():
    """The agent's side: one NUL in a rank's output must not get its whole report batch refused."""
    assert list(capped_lines(io.StringIO("loss\x00 1.5\nok\n"))) == ["loss\ufffd 1.5", "ok"]
