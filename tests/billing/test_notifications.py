"""E-mails (billing.notifications): the low-balance e-mail goes once per crossing and re-arms; a job's end
e-mails its owner once (not for the owner's own cancel), unless the owner turned job e-mails off; the operator's
cancel is always e-mailed, with its reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse

from billing.models import NotificationSettings
from billing.notifications import save_settings, send_job_end_email
from billing.services.ledger import balance_of
from billing.services.meter import run_meter
from fleet.choices import JobStatus
from portal.celery import app as celery_app
from tests.support.meter import T0, fund, open_allocation
from workers.services import lifecycle

pytestmark = pytest.mark.django_db

TEN, SEVEN = 10_000_000, 7_000_000  # ¥10.00, ¥7.00; four chips cost ¥4.80 an hour


@pytest.fixture(autouse=True)
def eager():
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


@pytest.fixture
def running(alice, enroll, planning_job):  # noqa: F811
    """Alice with ¥10.00 and a job on four chips from T0."""
    fund(alice, TEN)
    node, _ = enroll("mailer", chips=4)
    job = planning_job(status=JobStatus.RUNNING, name="mail-test")
    open_allocation(job, node)
    return job


@pytest.fixture
def tick(django_capture_on_commit_callbacks):
    def at(minutes: int):
        with django_capture_on_commit_callbacks(execute=True):
            run_meter(T0 + timedelta(minutes=minutes))

    return at


def low_balance_mails(outbox) -> list:
    return [mail for mail in outbox if "balance is below" in mail.subject]


def test_crossing_below_the_threshold_sends_one_email_not_one_per_tick(running, alice, tick, mailoutbox):
    save_settings(alice, low_balance_threshold=SEVEN, job_emails=True)

    tick(30)  # ¥7.60 left: above
    assert low_balance_mails(mailoutbox) == []
    tick(60)  # ¥5.20: below
    tick(75)
    tick(90)

    (mail,) = low_balance_mails(mailoutbox)
    assert mail.to == [alice.email]
    assert mail.subject == "Starverse: your balance is below ¥7.00"
    assert "Your Starverse balance is ¥5.20, below the ¥7.00" in mail.body
    assert "/billing/" in mail.body
    html, _ = mail.alternatives[0]
    assert "<strong>¥5.20</strong>" in html
    assert NotificationSettings.objects.get(user=alice).low_balance_notified


def test_back_above_the_threshold_re_arms_it(running, alice, tick, mailoutbox):
    save_settings(alice, low_balance_threshold=SEVEN, job_emails=True)
    tick(60)  # ¥5.20
    fund(alice, TEN, key="more")  # ¥15.20
    tick(75)  # ¥14.00: above again, re-armed, no e-mail
    assert len(low_balance_mails(mailoutbox)) == 1
    assert not NotificationSettings.objects.get(user=alice).low_balance_notified

    tick(165)  # ¥6.80: below again
    assert balance_of(alice) < SEVEN
    assert len(low_balance_mails(mailoutbox)) == 2


def test_without_a_threshold_nothing_is_sent(running, alice, tick, mailoutbox):
    tick(60)
    tick(110)
    assert low_balance_mails(mailoutbox) == []


def test_a_threshold_set_above_the_balance_counts_as_already_crossed(running, alice, tick, mailoutbox):
    save_settings(alice, low_balance_threshold=20 * TEN, job_emails=True)
    tick(30)
    assert low_balance_mails(mailoutbox) == []


def end(job, status, django_capture_on_commit_callbacks, reason=""):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        lifecycle.finish(job, status, reason, now=T0 + timedelta(minutes=30))


def job_mails(outbox, job) -> list:
    return [mail for mail in outbox if f"job {job.pk} " in mail.subject]


def test_a_succeeded_job_emails_its_owner_once_with_its_link_and_cost(
    running, alice, tick, mailoutbox, django_capture_on_commit_callbacks, settings
):
    settings.SITE_URL = "https://starverse.example"
    tick(30)  # ¥2.40 of compute

    end(running, JobStatus.SUCCEEDED, django_capture_on_commit_callbacks, "Trained 10 steps; final loss 1.2345")
    end(running, JobStatus.SUCCEEDED, django_capture_on_commit_callbacks)  # a duplicate report: already finished
    send_job_end_email(running.pk)  # a retried task

    (mail,) = job_mails(mailoutbox, running)
    assert mail.subject == f"Starverse: job {running.pk} finished (mail-test)"
    assert "Succeeded" in mail.body and "Trained 10 steps; final loss 1.2345" in mail.body
    assert "Compute charged for this job: ¥2.40" in mail.body
    assert f"https://starverse.example/jobs/{running.pk}/" in mail.body
    html, mimetype = mail.alternatives[0]
    assert mimetype == "text/html" and f'href="https://starverse.example/jobs/{running.pk}/"' in html


@pytest.mark.parametrize(
    ("status", "subject"), [(JobStatus.FAILED, "failed"), (JobStatus.STOPPED_NO_CREDIT, "was stopped: out of credit")]
)
def test_a_failed_or_credit_stopped_job_emails_its_owner(
    running, mailoutbox, django_capture_on_commit_callbacks, status, subject
):
    end(running, status, django_capture_on_commit_callbacks, "Out of credit")

    (mail,) = job_mails(mailoutbox, running)
    assert subject in mail.subject
    if status == JobStatus.STOPPED_NO_CREDIT:
        assert "A checkpoint was taken before stopping" in mail.body


def test_a_job_cancelled_by_its_owner_sends_nothing(running, mailoutbox, django_capture_on_commit_callbacks):
    end(running, JobStatus.CANCELLED, django_capture_on_commit_callbacks)
    assert job_mails(mailoutbox, running) == []


def test_a_job_the_operator_cancelled_emails_its_owner_the_reason_once_its_ranks_have_exited(
    running, alice, mailoutbox, django_capture_on_commit_callbacks
):
    save_settings(alice, low_balance_threshold=0, job_emails=False)  # not the owner's doing: told all the same
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.cancel(running, operator_reason="Host maintenance in cn-east-1", now=T0 + timedelta(minutes=20))
    assert job_mails(mailoutbox, running) == []  # stopping: its ranks are told to stop

    running.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        lifecycle.finish_when_ranks_done(running, T0 + timedelta(minutes=21))

    (mail,) = job_mails(mailoutbox, running)
    assert mail.subject == f"Starverse: job {running.pk} was cancelled by the operator (mail-test)"
    assert "Cancelled by the operator: Host maintenance in cn-east-1" in mail.body
    running.refresh_from_db()
    assert running.status == JobStatus.CANCELLED
    assert running.status_reason == "Cancelled by the operator: Host maintenance in cn-east-1"


def test_job_emails_turned_off_are_not_sent(running, alice, mailoutbox, django_capture_on_commit_callbacks):
    save_settings(alice, low_balance_threshold=0, job_emails=False)
    end(running, JobStatus.SUCCEEDED, django_capture_on_commit_callbacks)
    assert job_mails(mailoutbox, running) == []


def test_the_billing_page_saves_the_email_settings(client, alice):
    client.force_login(alice)
    assert 'data-testid="email-settings"' in client.get(reverse("billing")).content.decode()

    response = client.post(reverse("email_settings"), {"low_balance_threshold": "20.50"})

    assert response.status_code == 302 and response["Location"].endswith("/billing/#emails")
    row = NotificationSettings.objects.get(user=alice)
    assert (row.low_balance_threshold, row.job_emails) == (20_500_000, False)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("lots", "Enter the threshold as a number"),
        ("-5", "zero or more"),
        ("1.005", "at most two decimals"),
        ("1e12", "The largest threshold is"),
        ("NaN", "zero or more"),
    ],
)
def test_a_bad_threshold_is_a_400_naming_the_problem(client, alice, value, problem):
    client.force_login(alice)

    response = client.post(reverse("email_settings"), {"low_balance_threshold": value, "job_emails": "on"})

    assert response.status_code == 400
    assert problem in response.content.decode()
    assert not NotificationSettings.objects.filter(user=alice).exists()


def test_a_credit_stop_emails_when_asked_and_its_end_sends_nothing_more(
    running, alice, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.stop_for_credit(running.pk, "Stopped before your balance ran out", now=T0 + timedelta(minutes=20))
    (mail,) = job_mails(mailoutbox, running)
    assert "was stopped: out of credit" in mail.subject
    assert "Stopped before your balance ran out" in mail.body and "A checkpoint was taken" in mail.body

    running.refresh_from_db()
    end(running, JobStatus.STOPPED_NO_CREDIT, django_capture_on_commit_callbacks, running.status_reason)

    assert len(job_mails(mailoutbox, running)) == 1
