"""Prepared queries (base/prepared.py): the API's list pages and the balance, compiled once, answer exactly
what the ORM answers, page by page, and a prepared query refuses what it cannot prepare."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from base.prepared import PreparedPage, PreparedQuery
from billing.services.credits import adjust_credit
from fleet.choices import AllocationMode, JobStatus, MigrationReason, MigrationStatus
from fleet.models import Allocation, ChipType, Job
from kernel.money import to_micros
from market.models import Bid, BidStatus
from tests.support.accounts import token_client
from workers.models import JobMigration

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/v1/account/",
    "/api/v1/jobs/",
    "/api/v1/jobs/?page_size=2",
    "/api/v1/jobs/?page_size=2&page=2",
    "/api/v1/jobs/?status=succeeded",
    "/api/v1/jobs/?status=running",
    "/api/v1/ledger/",
    "/api/v1/ledger/?page_size=3&page=2",
    "/api/v1/bids/",
    "/api/v1/bids/?status=closed",
    "/api/v1/bids/?page_size=1&page=3",
]


def rows_through_the_orm(self, *, limit=None, offset=0, **values):
    queryset = self.build(**values)
    return list(queryset[offset : offset + limit] if limit is not None else queryset)


@pytest.fixture
def history(alice, bob, enroll):  # noqa: F811
    """Alice's account as a dashboard sees it: credit, jobs (some moved, some charged) and bids; Bob's beside it."""
    now = timezone.now()
    chips = list(ChipType.objects.order_by("sort_order"))
    node, _ = enroll("prepared-node", chips=8)
    for owner in (alice, bob):
        for row in range(5):
            adjust_credit(owner, to_micros("5"), reason="credit", actor=None, key=f"test:{owner.pk}:{row}")
        jobs = []
        for number in range(5):
            job = Job.objects.create(
                owner=owner,
                name=f"run {number}",
                model_name="llama-tiny",
                per_device_batch_size=4,
                max_steps=100,
                max_budget_per_hour=to_micros("28"),
                status=JobStatus.SUCCEEDED if number % 2 else JobStatus.FAILED,
                created_at=now - timedelta(minutes=number),
            )
            for moved in range(number % 3):
                JobMigration.objects.create(
                    job=job,
                    reason=MigrationReason.OUTBID,
                    status=MigrationStatus.RESUMED,
                    from_epoch=moved + 1,
                    to_epoch=moved + 2,
                    notice_at=now - timedelta(seconds=moved),
                    notice_seconds=30,
                )
            if number % 2:
                Allocation.objects.create(
                    job=job,
                    node=node,
                    chip_type_id=node.pool.chip_type_id,
                    chips=2,
                    mode=AllocationMode.ON_DEMAND,
                    epoch=1,
                    started_at=now,
                    billed_through=now,
                    charged_total=1_234_567 * number,
                )
            jobs.append(job)
        for number in range(4):
            Bid.objects.create(
                owner=owner,
                job=jobs[number],
                chip_type=chips[number % len(chips)],
                chips=1 + number,
                max_price_per_hour=to_micros("1.5"),
                status=BidStatus.CLOSED,
                placed_at=now,
            )
    return alice


def test_each_list_page_answers_what_the_orm_answers(history, monkeypatch):
    api = token_client(history)
    prepared = {path: api.get(path).json() for path in LISTS}
    monkeypatch.setattr(PreparedQuery, "rows", rows_through_the_orm)
    through_the_orm = {path: api.get(path).json() for path in LISTS}
    for path in LISTS:
        assert prepared[path] == through_the_orm[path], path
    jobs = prepared["/api/v1/jobs/"]["results"]
    assert len(jobs) == 5 and sorted(len(job["migrations"]) for job in jobs) == [0, 0, 1, 1, 2]
    assert {job["name"] for job in prepared["/api/v1/jobs/?status=running"]["results"]} == set()
    assert prepared["/api/v1/bids/?page_size=1&page=3"]["count"] == 4


def test_a_page_costs_its_queries_and_no_compiling_after_the_first(history, monkeypatch):
    api = token_client(history)
    api.get("/api/v1/jobs/")  # compiles the page's shape (and records the token's use)
    compiled = []
    as_sql = SQLCompiler.as_sql
    monkeypatch.setattr(SQLCompiler, "as_sql", lambda self, *a, **k: compiled.append(self) or as_sql(self, *a, **k))
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/v1/jobs/").status_code == 200
    assert compiled == []
    assert len(queries) == 2  # the page with its cost, then the page's migrations


def test_a_parameter_left_out_is_a_shape_of_its_own(history):
    jobs = PreparedQuery(
        lambda owner, status: Job.objects.filter(owner=owner, **({"status": status} if status else {})).order_by("id"),
        owner=int,
        status=str,
    )
    everything = jobs.rows(owner=history.pk, status=None)
    assert [job.pk for job in everything] == list(
        Job.objects.filter(owner=history).order_by("id").values_list("pk", flat=True)
    )
    assert {job.status for job in jobs.rows(owner=history.pk, status=JobStatus.FAILED)} == {JobStatus.FAILED}
    assert len(jobs.rows(owner=history.pk, status=None, limit=2, offset=4)) == 1


def test_any_of_takes_a_list_of_any_length_as_one_parameter(history):
    migrations = PreparedQuery(lambda jobs: JobMigration.objects.filter(job_id__any_of=jobs), jobs=list)
    ids = list(Job.objects.filter(owner=history).values_list("pk", flat=True))
    for some in (ids[:1], ids, []):
        expected = JobMigration.objects.filter(job_id__in=some)
        assert [m.pk for m in migrations.rows(jobs=some)] == [m.pk for m in expected]


def test_a_build_that_does_not_pass_a_parameter_to_the_database_is_refused(history):
    ignores_status = PreparedQuery(lambda owner, status: Job.objects.filter(owner=owner), owner=int, status=str)
    with pytest.raises(ValueError, match="status"):
        ignores_status.rows(owner=history.pk, status="running")
    sliced = PreparedQuery(lambda owner: Job.objects.filter(owner=owner)[:3], owner=int)
    with pytest.raises(ValueError, match="sliced"):
        sliced.rows(owner=history.pk)
    with pytest.raises(TypeError, match="parameters"):
        sliced.rows(user=history.pk)
    with pytest.raises(TypeError, match="owner: expected int"):
        PreparedQuery(lambda owner: Job.objects.filter(owner=owner), owner=int).rows(owner=str(history.pk))


def test_a_page_counts_through_the_orm(history):
    page = PreparedPage(
        PreparedQuery(lambda owner: Job.objects.filter(owner=owner).order_by("id"), owner=int), owner=history.pk
    )
    assert len(page[0:3]) == 3
    assert page.order_by().count() == Job.objects.filter(owner=history).count() == 5
    with pytest.raises(TypeError):
        page[2]


def test_json_answers_carry_no_page_policy_and_pages_keep_theirs(client, history):
    api = token_client(history)
    assert "Content-Security-Policy" not in api.get("/api/v1/jobs/")
    client.force_login(history)
    assert "Content-Security-Policy" in client.get("/")
