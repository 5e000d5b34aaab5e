"""The gateway's one-query lookup (`serving_deployment`): the caller's live deployment of a name and the replicas
that may take a request now, the same as `ready_replicas` finds."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import DeploymentStatus
from tests.openai_api.test_gateway import make_deployment, make_replica
from workers.services.replicas import Replica, ready_replicas, serving_deployment

pytestmark = pytest.mark.django_db


def test_the_users_live_deployment_comes_with_its_ready_replicas_only(alice):
    deployment = make_deployment(alice)
    ready = make_replica(deployment, "http://127.0.0.1:9001/v1")
    make_replica(deployment, None)  # its engine is starting
    draining = make_replica(deployment, "http://127.0.0.1:9002/v1")
    draining.cancel_requested_at = timezone.now()
    draining.save(update_fields=["cancel_requested_at"])
    moved = make_replica(deployment, "http://127.0.0.1:9003/v1")
    moved.epoch = 2  # placed again since its engine reported: that report is stale
    moved.save(update_fields=["epoch"])
    make_replica(deployment, "http://127.0.0.1:9004/v1", status=JobStatus.SUCCEEDED)

    found, replicas = serving_deployment(alice, deployment.name)

    assert found == deployment and found.max_model_len == deployment.max_model_len
    assert replicas == [Replica(ready.pk, "http://127.0.0.1:9001/v1", True)] == ready_replicas(deployment)


def test_a_deployment_with_no_replica_ready_comes_with_none(alice):
    deployment = make_deployment(alice, status=DeploymentStatus.IDLE)

    assert serving_deployment(alice, deployment.name) == (deployment, [])


def test_another_users_a_stopped_or_an_unknown_deployment_is_none(alice, bob):
    make_deployment(bob, name="bobs")
    make_deployment(alice, name="gone", status=DeploymentStatus.STOPPED)

    assert serving_deployment(alice, "bobs") is None
    assert serving_deployment(alice, "gone") is None
    assert serving_deployment(alice, "nothing") is None
