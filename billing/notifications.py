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
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.core.mail import send_mail
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from kombu.exceptions import OperationalError

from base.formatting import zone_label
from billing.models import Charge, NotificationSettings, SentNotification
from billing.services.ledger import balance_of
from fleet.choices import JobStatus
from fleet.models import Job
from kernel.money import format_money

logger = logging.getLogger(__name__)

# The job ends that send an e-mail, and their subjects; a cancel is the owner's own doing, unless the operator
# cancelled. Whole sentences, so that each language orders them its own way.
JOB_END_SUBJECTS = {
    JobStatus.SUCCEEDED: gettext_lazy("Starverse: job %(id)s finished (%(title)s)"),
    JobStatus.FAILED: gettext_lazy("Starverse: job %(id)s failed (%(title)s)"),
    JobStatus.STOPPED_NO_CREDIT: gettext_lazy("Starverse: job %(id)s was stopped: out of credit (%(title)s)"),
}
OPERATOR_CANCEL_SUBJECT = gettext_lazy("Starverse: job %(id)s was cancelled by the operator (%(title)s)")


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
    with recipients_locale(user):
        context = {
            "user": user,
            "balance": format_money(balance),
            "threshold": format_money(threshold),
            "at": local_time(timezone.now()),
            "billing_url": settings.SITE_URL.rstrip("/") + reverse("billing"),
        }
        subject = _("Starverse: your balance is below %(threshold)s") % {"threshold": context["threshold"]}
        _send(user, subject, "low_balance", context)


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
    # The key and the sending commit together: a failed send leaves no key, a second task finds it.
    with transaction.atomic():
        try:
            with transaction.atomic():
                SentNotification.objects.create(key=f"job-end:{job.pk}", user=job.owner)
        except IntegrityError:
            return  # sent already (a retried or duplicated task)
        with recipients_locale(job.owner):
            _send(job.owner, *job_end_email(job, status, cost, by_operator=by_operator))


def job_end_email(job: Job, status: str, cost: int, *, by_operator: bool = False) -> tuple[str, str, dict]:
    """The subject, template and context of a job's end e-mail, in the active language and time zone."""
    context = {
        "job": job,
        "title": job.name or job.model_name,
        "status": JobStatus(status).label,
        "succeeded": status == JobStatus.SUCCEEDED,
        "stopped_for_credit": status == JobStatus.STOPPED_NO_CREDIT,
        "ended": local_time(job.finished_at or timezone.now()),
        "cost": format_money(cost),
        "balance": format_money(balance_of(job.owner)),
        "job_url": settings.SITE_URL.rstrip("/") + reverse("job", args=[job.pk]),
        "billing_url": settings.SITE_URL.rstrip("/") + reverse("billing"),
    }
    subject = (OPERATOR_CANCEL_SUBJECT if by_operator else JOB_END_SUBJECTS[status]) % {
        "id": job.pk,
        "title": context["title"],
    }
    return subject, "job_ended", context


# -- the recipient's language and time zone ------------------------------------------------------


@contextmanager
def recipients_locale(user) -> Iterator[None]:
    """Write an e-mail in its recipient's language (their saved one, else the site's, English) and show
    its times in their time zone (their saved one, else DISPLAY_TIME_ZONE): no request tells us either."""
    try:
        preferences = user.preferences
    except ObjectDoesNotExist:
        preferences = None
    language = (preferences.language if preferences else "") or settings.LANGUAGE_CODE
    try:
        zone = zoneinfo.ZoneInfo(preferences.time_zone if preferences else settings.DISPLAY_TIME_ZONE)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = zoneinfo.ZoneInfo(settings.DISPLAY_TIME_ZONE)
    with translation.override(language), timezone.override(zone):
        yield


def local_time(moment: datetime) -> str:
    """A time for an e-mail, plain text: in the active zone and language, with the offset ("2026-12-07 14:05 UTC+8")."""
    local = timezone.localtime(moment)
    return f"{date_format(local, 'DATETIME_FORMAT')} {zone_label(local)}"


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
