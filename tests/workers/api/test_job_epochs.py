"""A job asked in epochs: the quote shows the steps its dataset's tokens and global batch come to, and the
job trains that many; a dataset with no end, or both counts, is refused naming n_epochs."""

from __future__ import annotations

import math

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from fleet.models import Job
from kernel.spec import JobSpec
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC

pytestmark = pytest.mark.django_db

LINES = [f"line {i} of a small corpus for training" for i in range(200)]


@pytest.fixture(autouse=True)
def alice_has_credit(fund, alice):
    fund(alice)


@pytest.fixture
def online_fleet(enroll):
    return [enroll("e-4090", "rtx-4090", chips=2)[0]]


@pytest.fixture
def corpus(alice):
    body = "\n".join(LINES).encode()
    response = token_client(alice).post(
        "/api/v1/datasets/", {"file": SimpleUploadedFile("corpus.txt", body)}, format="multipart"
    )
    assert response.status_code == 201, response.json()
    return response.json()["reference"]


def expected_steps(n_epochs: float, plan: dict) -> int:
    # llama-tiny reads bytes: each line and its end-of-sequence token.
    tokens = sum(len(line.encode()) + 1 for line in LINES)
    seq = plan["tokens_per_step"] // plan["global_batch"]
    return math.ceil(n_epochs * math.ceil((tokens - 1) / seq) / plan["global_batch"])


def test_the_quote_shows_the_steps_that_many_epochs_come_to(alice, online_fleet, corpus):
    spec = {key: value for key, value in JOB_SPEC.items() if key != "max_steps"}
    response = token_client(alice).post("/api/v1/quotes/", {**spec, "dataset": corpus, "n_epochs": 3}, format="json")
    assert response.status_code == 200, response.json()
    plan = response.json()
    assert plan["steps"] == expected_steps(3, plan) > 1


def test_a_job_in_epochs_trains_the_steps_they_come_to_and_keeps_its_global_batch(
    alice, online_fleet, corpus, no_celery
):
    spec = {key: value for key, value in JOB_SPEC.items() if key != "max_steps"}
    response = token_client(alice).post("/api/v1/jobs/", {**spec, "dataset": corpus, "n_epochs": 2}, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.n_epochs == 2 and job.max_steps == expected_steps(2, job.quote.to_dict())
    assert response.json()["n_epochs"] == 2
    assert JobSpec.of_job(job).global_batch == job.quote.global_batch  # a re-plan keeps the batch counted in


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_epochs": 2}, "synthetic"),  # the synthetic corpus never ends
        ({"n_epochs": 0}, "greater than"),
        ({"n_epochs": 2, "max_steps": 10, "dataset": None}, "not both"),
    ],
)
def test_epochs_that_cant_be_counted_are_refused_naming_n_epochs(
    alice, online_fleet, corpus, no_celery, change, message
):
    spec = {key: value for key, value in JOB_SPEC.items() if key != "max_steps"}
    body = {**spec, **change}
    if body.get("dataset", "") is None:
        body["dataset"] = corpus
    response = token_client(alice).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["errors"]["n_epochs"]), response.json()
    assert not Job.objects.exists()


def test_neither_steps_nor_epochs_is_refused_on_max_steps(alice, online_fleet, no_celery):
    spec = {key: value for key, value in JOB_SPEC.items() if key != "max_steps"}
    response = token_client(alice).post("/api/v1/jobs/", spec, format="json")
    assert response.status_code == 400 and "max_steps" in response.json()["errors"]
