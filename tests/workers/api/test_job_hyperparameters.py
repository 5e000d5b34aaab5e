"""A job's hyperparameters through the API: the defaults it gets, what the owner sets, and a 400 naming
each bad value with nothing created."""

from __future__ import annotations

import pytest

from fleet.choices import JobStatus
from fleet.models import Job
from hosts.agent.commands import launch_from_dict
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.plans import hand_plan
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def alice_has_credit(fund, alice):
    fund(alice)


@pytest.fixture
def online_fleet(enroll):
    return [enroll("h-4090", "rtx-4090", chips=2)[0]]


def test_a_job_without_hyperparameters_gets_the_defaults_for_a_model_trained_from_scratch(
    alice, online_fleet, no_celery
):
    response = token_client(alice).post("/api/v1/jobs/", JOB_SPEC, format="json")
    assert response.status_code == 201, response.json()
    shown = response.json()["hyperparameters"]
    assert (shown["learning_rate"], shown["lr_scheduler"], shown["weight_decay"]) == (3e-3, "cosine", 0.1)
    assert Job.objects.get().hyperparameters == shown


def test_the_owners_settings_reach_every_rank(alice, online_fleet, no_celery):
    settings = {"learning_rate": 1e-3, "lr_scheduler": "linear", "warmup_steps": 5, "max_grad_norm": 0.5, "seed": 42}
    response = token_client(alice).post(
        "/api/v1/jobs/", {**JOB_SPEC, "hyperparameters": {**settings, "checkpoint_every": 7}}, format="json"
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.hyperparameters["warmup_ratio"] is None  # steps were given
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PLANNING)  # as the scheduler takes it up
    assert allocate(job, hand_plan((online_fleet[0], 2)))
    job.refresh_from_db()
    launches = [launch_from_dict(rank) for rank in job.commands.get(type="start").payload["ranks"]]
    assert launches and all(launch.learning_rate == 1e-3 for launch in launches)
    assert all(launch.hyperparameters | settings == launch.hyperparameters for launch in launches)
    assert {launch.checkpoint_every for launch in launches} == {7}
    assert {launch.seed for launch in launches} == {42}


@pytest.mark.parametrize(
    ("hyperparameters", "field"),
    [
        ({"learning_rate": 0}, "learning_rate"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"lr_scheduler": "exponential"}, "lr_scheduler"),
        ({"warmup_ratio": 0.9}, "warmup_ratio"),
        ({"warmup_ratio": 0.1, "warmup_steps": 10}, "warmup_steps"),
        ({"adam_beta2": 1.0}, "adam_beta2"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"max_grad_norm": "inf"}, "max_grad_norm"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"seed": -1}, "seed"),
        ({"lerning_rate": 1e-4}, "lerning_rate"),
    ],
)
def test_a_bad_hyperparameter_is_refused_naming_it_and_nothing_is_created(
    alice, online_fleet, no_celery, hyperparameters, field
):
    response = token_client(alice).post(
        "/api/v1/jobs/", {**JOB_SPEC, "hyperparameters": hyperparameters}, format="json"
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert field in str(errors.get("hyperparameters", errors)), errors
    assert not Job.objects.exists() and not no_celery
