"""Launching a job: the one path from a validated job spec to a queued job (the API and the train page).

In order: plan it (on the chips free now, else on the whole enrolled fleet as if it were free:
what even that can't place is refused, what only lacks free chips queues), refuse a total budget
the job would spend within the stop margin, then under the owner's credit lock: the cap on
waiting jobs, the credit hold on top of what the owner's queued jobs and bids already hold, and
the submit. Every refusal is a `LaunchRefused` naming the field and a code of the API's error
format; the API answers it as a 400, the page as a form error.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext, gettext_lazy

from base.stored_text import StoredText
from billing.models import OperatorSettings
from billing.services.holds import HoldRefused, check_hold, hold_needed, lock_credit
from fleet.models import Job
from kernel import planner
from kernel.money import cost_over, format_money
from kernel.spec import JobSpec
from market.services.commitments import WAITING, commitments
from workers.services.epochs import EpochsRefused, with_epochs
from workers.services.kernel_text import in_readers_language, to_store
from workers.services.lifecycle import submit
from workers.services.models import ModelUnavailable, lock_for_launch
from workers.services.planning import fleet_chips, fleet_quote, model_spec, quote

# Which field a planning error is about, its code in the error format (the SDK's typed errors), and
# its title on the pages.
PLANNING_REFUSALS = {
    planner.ModelDoesNotFit: ("model", "model_does_not_fit", gettext_lazy("Model does not fit")),
    planner.BudgetTooLow: ("max_budget", "budget_too_low", gettext_lazy("Budget too low")),
    planner.NoCapacity: ("chip_counts", "no_capacity", gettext_lazy("No capacity")),
    planner.InvalidRequest: ("non_field_errors", "invalid", gettext_lazy("Invalid request")),
}


class LaunchRefused(Exception):
    """A launch that can't go ahead: `field` and `code` as in the API's error format, `title` for pages."""

    def __init__(self, field: str, code: str, message: str, title: str = ""):
        super().__init__(message)
        self.field, self.code, self.title = field, code, title


def refusal_of(error: planner.PlanningError) -> LaunchRefused:
    field, code, title = PLANNING_REFUSALS.get(type(error), ("non_field_errors", "invalid", gettext_lazy("No plan")))
    return LaunchRefused(field, code, planning_message(error), str(title))


def planning_message(error: planner.PlanningError) -> str:
    """The planner's reason in the reader's language (the kernel keeps its English template and numbers)."""
    return in_readers_language(error)


def planning_text(error: planner.PlanningError) -> str | StoredText:
    """The planner's reason to store (a job's status reason, an event): its template and numbers, so the
    pages show it in the reader's language; an error made without a template stays English."""
    return to_store(error)


def launch(owner, spec: JobSpec, *, deployment=None) -> Job:
    """Refuse or queue one job for `owner` (a replica of `deployment`, when given: workers/services/deployments.py)."""
    try:
        spec, plan = with_epochs(spec, launch_plan)  # a job given epochs gets its steps here
        model = model_spec(spec)
    except ModelUnavailable as error:  # deleted since the spec was checked
        raise LaunchRefused("model", "model_unavailable", str(error)) from None
    except EpochsRefused as error:
        raise LaunchRefused("n_epochs", "invalid", str(error)) from None
    check_total_budget(spec, plan)
    with transaction.atomic():
        lock_credit(owner)  # the cap and the hold below are read and written as one decision per owner
        try:
            lock_for_launch(spec.model_name)
        except ModelUnavailable as error:
            raise LaunchRefused("model", "model_unavailable", str(error)) from None
        check_queue_cap(owner)
        hold = hold_needed(plan.price_per_hour)
        try:
            check_hold(owner, plan.price_per_hour, committed=commitments(owner).total())
        except HoldRefused as error:
            raise LaunchRefused("balance", "insufficient_credit", str(error)) from None
        return submit(owner, spec, credit_hold=hold, model=model, quote=plan, deployment=deployment)


def launch_plan(spec: JobSpec) -> planner.Plan:
    """The plan on the chips free now; without free chips, the enrolled fleet's plan (the job will wait)."""
    try:
        return quote(spec)
    except planner.NoCapacity:
        pass
    except planner.PlanningError as error:
        raise refusal_of(error) from None
    try:
        return fleet_quote(spec)
    except planner.NoCapacity:
        raise never_placeable(spec) from None
    except planner.PlanningError as error:
        raise refusal_of(error) from None


def fleet_refusal(spec: JobSpec) -> LaunchRefused | None:
    """Why the enrolled fleet could never place this job, even with every chip free (None: it could)."""
    try:
        fleet_quote(spec)
    except planner.NoCapacity:
        return never_placeable(spec)
    except planner.PlanningError as error:
        return refusal_of(error)
    return None


def never_placeable(spec: JobSpec) -> LaunchRefused:
    """`no_capacity`, naming what was asked and what the fleet has online."""
    fleet = fleet_chips(spot_only=spec.spot_only)
    asked = spec.chip_counts or {}
    short = [(slug, count) for slug, count in sorted(asked.items()) if count > fleet.get(slug, 0)]
    if short:
        slug, count = short[0]
        if spec.spot_only:
            message = gettext(
                "%(count)s × %(chip)s asked; the fleet has %(have)s spot-eligible %(chip)s chips online. "
                "It could never be placed."
            )
        else:
            message = gettext(
                "%(count)s × %(chip)s asked; the fleet has %(have)s %(chip)s chips online. It could never be placed."
            )
        message %= {"count": count, "chip": slug, "have": fleet.get(slug, 0)}
    else:
        have = ", ".join(f"{n} {slug}" for slug, n in sorted(fleet.items())) or gettext("none")
        if spec.spot_only:
            message = gettext(
                "The fleet has no spot-eligible chips this job could run on (online spot-eligible chips: "
                "%(have)s). It could never be placed."
            )
        else:
            message = gettext(
                "The fleet has no chips this job could run on (online chips: %(have)s). It could never be placed."
            )
        message %= {"have": have}
    return LaunchRefused("chip_counts", "no_capacity", message, gettext("No capacity"))


def check_total_budget(spec: JobSpec, plan: planner.Plan) -> None:
    """A total budget the job would spend within the stop margin stops it at once: refuse it at launch."""
    budget = spec.total_budget
    if budget is None:
        return
    minutes = OperatorSettings.load().stop_margin_minutes
    least = cost_over(plan.price_per_hour, timedelta(minutes=minutes))
    if budget <= least:
        raise LaunchRefused(
            "total_budget",
            "budget_too_low",
            gettext(
                "The total budget %(budget)s is not more than %(minutes)s minutes of this plan's spend "
                "(%(least)s at %(price)s/h); a job stops when its budget would run out within %(minutes)s "
                "minutes, so it would stop at once. Set a total budget above %(least)s."
            )
            % {
                "budget": format_money(budget),
                "minutes": minutes,
                "least": format_money(least),
                "price": format_money(plan.price_per_hour),
            },
            gettext("Budget too low"),
        )


def check_queue_cap(owner) -> None:
    """At most MAX_QUEUED_JOBS_PER_USER of the owner's jobs wait to be placed at once (call under lock_credit)."""
    cap = settings.MAX_QUEUED_JOBS_PER_USER
    waiting = Job.objects.filter(owner=owner, status__in=WAITING).count()
    if waiting >= cap:
        raise LaunchRefused(
            "non_field_errors",
            "too_many_queued",
            gettext(
                "You have %(waiting)s jobs waiting to be placed; at most %(cap)s may wait at once. "
                "Cancel one, or launch again once one has started."
            )
            % {"waiting": waiting, "cap": cap},
            gettext("Too many queued jobs"),
        )
