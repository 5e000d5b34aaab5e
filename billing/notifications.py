"""E-mails about money and jobs: the balance fell below the user's threshold; a job ended.

Low balance: the meter calls `note_balances` once per charge batch, inside its transaction, with
each charged wallet's new balance. One UPDATE over the users who set a threshold flips a
`low_balance_notified` flag: on when the balance is below the threshold (an e-mail goes out after
the commit, once), off again when it is back at or above (re-armed). Nothing is read per tick.

Job ends: the job lifecycle calls `job_ended` after a job's final status commits; a Celery task
sends one e-mail (succeeded, failed, stopped for credit; not for a job its owner cancelled) unless
the owner turned job e-mails off. A job the operator cancelled is always e-mailed, with the operator's
reason: it was not the owner's doing, and the owner must not learn it only from the job page. A credit
stop e-mails when it is asked (`credit_stop_requested`), and that is the e-mail of its end. A
`SentNotification` key per job keeps a retried task from sending twice. Sending never happens inside
the transaction that changed the money or the job.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum
from django.template.loader import render_to_string
from django.urls import reverse
from kombu.exceptions import OperationalError

from billing.models import Charge, NotificationSettings, SentNotification
from billing.services.ledger import balance_of
from fleet.choices import JobStatus
from fleet.models import Job
from kernel.money import format_money

logger = logging.getLogger(__name__)

# The job ends that send an e-mail; a cancel is the owner's own doing, unless the operator cancelled.
JOB_END_SUBJECTS = {
    JobStatus.SUCCEEDED: "finished",
    JobStatus.FAILED: "failed",
    JobStatus.STOPPED_NO_CREDIT: "was stopped: out of credit",
}
OPERATOR_CANCEL_SUBJECT = "was cancelled by the operator"


# -- settings ------------------------------------------------------------------------------------


def settings_for(user) -> NotificationSettings:
    """The user's choices; the defaults (unsaved) when they never changed any."""
    return NotificationSettings.objects.filter(user=user).first() or NotificationSettings(user=user)


def save_settings(user, *, low_balance_threshold: int, job_emails: bool) -> NotificationSettings:
    """Store the user's choices. A threshold already above the balance counts as crossed (no e-mail now)."""
    with transaction.atomic():
        row, _ = NotificationSettings.objects.select_for_update().get_or_create(user=user)
        row.low_balance_threshold = low_balance_threshold
        row.job_emails = job_emails
        row.low_balance_notified = low_balance_threshold > 0 and balance_of(user) < low_balance_threshold
        row.save()
    return row


# -- low balance ---------------------------------------------------------------------------------


def note_balances(balances: dict[int, int]) -> None:
    """After charges: flag who crossed below their threshold (e-mailed after commit) and re-arm who is above.

    `balances`: user id -> wallet balance after this batch. Call inside the charging transaction.
    """
    if not balances:
        return
    users, amounts = zip(*balances.items(), strict=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_notificationsettings s SET low_balance_notified = (v.balance < s.low_balance_threshold)"
            " FROM unnest(%s::bigint[], %s::bigint[]) AS v(user_id, balance)"
            " WHERE s.user_id = v.user_id AND s.low_balance_threshold > 0"
            " AND s.low_balance_notified <> (v.balance < s.low_balance_threshold)"
            " RETURNING s.user_id, s.low_balance_notified, v.balance, s.low_balance_threshold",
            [list(users), list(amounts)],
        )
        crossed = [(user, balance, threshold) for user, notified, balance, threshold in cursor.fetchall() if notified]
    for user_id, balance, threshold in crossed:
        transaction.on_commit(lambda u=user_id, b=balance, t=threshold: _enqueue(send_low_balance_email, u, b, t))


def rearm_low_balance(user) -> None:
    """After a credit (a top-up): the next fall below the threshold e-mails again."""
    NotificationSettings.objects.filter(
        user=user, low_balance_notified=True, low_balance_threshold__lte=balance_of(user)
    ).update(low_balance_notified=False)


@shared_task(ignore_result=True)
def send_low_balance_email(user_id: int, balance: int, threshold: int) -> None:
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or not user.email:
        return
    context = {
        "user": user,
        "balance": format_money(balance),
        "threshold": format_money(threshold),
        "billing_url": settings.SITE_URL.rstrip("/") + reverse("billing"),
    }
    _send(user, f"Starverse: your balance is below {context['threshold']}", "low_balance", context)


# -- job ends ------------------------------------------------------------------------------------


def job_ended(job_id: int, status: str, *, by_operator: bool = False) -> None:
    """Called after the commit of a job's final status: queue its e-mail (if its end sends one)."""
    if status in JOB_END_SUBJECTS or by_operator:
        _enqueue(send_job_end_email, job_id)


def credit_stop_requested(job_id: int) -> None:
    """Called after the commit of a credit stop: the owner hears now, not when the ranks have exited.

    This is the e-mail of the job's end (`stopped_no_credit`, the only end a credit stop can have
    besides a failure): the end itself then sends nothing more. Sent here, not queued, so that it
    goes out even when the broker is what is failing.
    """
    try:
        send_job_end_email(job_id, stopping_for_credit=True)
    except Exception:  # noqa: BLE001 - the stop has committed; a mail server's trouble must not undo the caller
        logger.exception("could not e-mail the credit stop of job %s", job_id)


@shared_task(ignore_result=True)
def send_job_end_email(job_id: int, stopping_for_credit: bool = False) -> None:
    job = Job.objects.select_related("owner").filter(pk=job_id).first()
    if job is None or not job.owner.email or job.deployment_id:
        return  # a deployment's replica starts and stops as it scales: its page says so, not an e-mail per replica
    status = JobStatus.STOPPED_NO_CREDIT if stopping_for_credit else job.status
    by_operator = status == JobStatus.CANCELLED and bool(job.operator_cancel_reason())
    if not by_operator and (status not in JOB_END_SUBJECTS or not settings_for(job.owner).job_emails):
        return
    cost = Charge.objects.filter(job_id=job.pk).aggregate(total=Sum("amount"))["total"] or 0
    context = {
        "job": job,
        "title": job.name or job.model_name,
        "status": JobStatus(status).label,
        "succeeded": status == JobStatus.SUCCEEDED,
        "stopped_for_credit": status == JobStatus.STOPPED_NO_CREDIT,
        "cost": format_money(cost),
        "balance": format_money(balance_of(job.owner)),
        "job_url": settings.SITE_URL.rstrip("/") + reverse("job", args=[job.pk]),
        "billing_url": settings.SITE_URL.rstrip("/") + reverse("billing"),
    }
    subject = f"Starverse: job {job.pk} {OPERATOR_CANCEL_SUBJECT if by_operator else JOB_END_SUBJECTS[status]}"
    subject += f" ({context['title']})"
    # The key and the sending commit together: a failed send leaves no key, a second task finds it.
    with transaction.atomic():
        try:
            with transaction.atomic():
                SentNotification.objects.create(key=f"job-end:{job.pk}", user=job.owner)
        except IntegrityError:
            return  # sent already (a retried or duplicated task)
        _send(job.owner, subject, "job_ended", context)


# -- sending -------------------------------------------------------------------------------------


def _send(user, subject: str, template: str, context: dict) -> None:
    """Plain text with an HTML alternative, from templates/emails/<template>.txt and .html."""
    send_mail(
        subject,
        render_to_string(f"emails/{template}.txt", context),
        None,
        [user.email],
        html_message=render_to_string(f"emails/{template}.html", context),
    )


def _enqueue(task, *args) -> None:
    """Queue an e-mail; a broker that is down loses the e-mail, never the caller's work (it has committed)."""
    try:
        task.delay(*args)
    except OperationalError as error:
        logger.warning("could not queue %s%s: %s", task.name, args, error)
