"""The jobs list costs the same number of queries for 3 jobs as for 30 (cost and migrations included)."""

import pytest

from fleet.models import Job
from tests.support.accounts import token_client

pytestmark = pytest.mark.django_db


def make_jobs(owner, count):
    Job.objects.bulk_create(
        Job(owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1_000_000)
        for _ in range(count)
    )


def count_queries(api) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/v1/jobs/").status_code == 200
    return len(queries)


def test_listing_jobs_does_not_query_once_per_job(alice):
    api = token_client(alice)
    make_jobs(alice, 3)
    count_queries(api)  # first use of the token records it; not part of the comparison
    few = count_queries(api)
    make_jobs(alice, 27)
    assert count_queries(api) == few
