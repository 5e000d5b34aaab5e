"""The job page's Continue button (#31): a finished job with a checkpoint offers it; pressing it makes the new job
through the API's service and opens its page, which says where it continues from, and the old page lists it. The
credit-stop e-mail says how to go on (no more "submit the job again")."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobCheckpoint

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def stopped(alice, tmp_path, fund, enroll, no_celery) -> Job:
    enroll("a", "rtx-4090", chips=2)
    fund(alice)
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=50, max_budget_per_hour=28_000_000,
        status=JobStatus.STOPPED_NO_CREDIT, step=30,
    )  # fmt: skip
    path = stored_checkpoint(job.pk, 30, {"meta.json": b"{}"}, tmp_path)
    JobCheckpoint.objects.create(job=job, epoch=1, step=30, key=path.removeprefix("store:"), created_at=timezone.now())
    job.latest_checkpoint, job.latest_checkpoint_step = path, 30
    job.save()
    return job


def test_continue_from_the_job_page_opens_the_new_job_that_names_the_old(client, alice, stopped):
    client.force_login(alice)
    assert 'data-testid="continue"' in client.get(f"/jobs/{stopped.pk}/").content.decode()

    answer = client.post(f"/jobs/{stopped.pk}/continue/", {"additional_steps": "40"})

    new = Job.objects.get(continued_from=stopped)
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{new.pk}/"
    assert (new.step, new.max_steps, new.start_checkpoint) == (30, 70, f"checkpoints/job-{stopped.pk}/step-30")
    page = client.get(f"/jobs/{new.pk}/").content.decode()
    assert "Continued from" in page and f"job {stopped.pk}</a> (step 30)" in page
    assert 'data-testid="continue"' not in page  # queued: nothing to continue yet
    old = client.get(f"/jobs/{stopped.pk}/").content.decode()
    assert "Continued by" in old and f"job {new.pk}</a> (from step 30)" in old


def test_a_refused_continuation_goes_back_saying_why(client, alice, bob, stopped):
    client.force_login(alice)
    Job.objects.filter(pk=stopped.pk).update(status=JobStatus.RUNNING)

    answer = client.post(f"/jobs/{stopped.pk}/continue/", follow=True)

    assert "can&#x27;t be continued" in answer.content.decode() and "only a stopped" in answer.content.decode()
    assert not Job.objects.filter(continued_from=stopped).exists()
    client.force_login(bob)
    assert client.post(f"/jobs/{stopped.pk}/continue/").status_code == 404


def test_the_credit_stop_email_says_how_to_continue(stopped):
    context = {"job": stopped, "stopped_for_credit": True, "billing_url": "B", "job_url": "J", "title": "t"}
    for name in ("emails/job_ended.txt", "emails/job_ended.html"):
        text = render_to_string(name, context)
        assert "again" not in text and f"starverse continue {stopped.pk}" in text and "Continue" in text
