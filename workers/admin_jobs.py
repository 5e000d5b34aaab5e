"""Admin console: jobs, read-only, with their plan and money as people read them, and the operator's Cancel.

Jobs are the users' own: the console shows them read-only and may only cancel them, through the same
lifecycle path as the owner's Cancel button. An operator's cancel asks for a reason and a confirmation
first (one page for the Cancel button and the list action alike): the owner reads the reason on the job
page and in the e-mail the cancel sends.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy, ngettext

from base.admin import ReadOnlyMixin, zoned
from base.audit import record
from base.formatting import format_duration
from base.templatetags.money import money_html
from fleet.choices import JobStatus
from fleet.models import Allocation, Job
from kernel.money import format_money, format_price
from kernel.planner import Plan
from workers.services import lifecycle

CONFIRMATION = "admin/fleet/job/cancel_confirmation.html"


class AllocationInline(ReadOnlyMixin, admin.TabularInline):
    model = Allocation
    fields = ["node", "chip_type", "chips", "mode", "epoch", "started_at", "ended_at", "charged"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description=gettext_lazy("Charged"))
    def charged(self, allocation: Allocation):
        """An allocation's own total once it ended and the meter folded it into its billing line (the
        job's chips of that type and mode); until then it is billed with the line."""
        if allocation.ended_at is None or allocation.billed_through <= allocation.ended_at - timedelta(seconds=1):
            return gettext("billed with its line")
        return money_html(allocation.charged_total)


# The job's fields that people read as something other than their stored value (¥ amounts, a plan's
# summary), shown by the JobAdmin methods of these names.
JOB_DISPLAY_FIELDS = {
    "max_budget_per_hour": "budget_per_hour",
    "total_budget": "total_budget_money",
    "spot_bid_per_hour": "spot_bid",
    "credit_hold": "credit_hold_money",
    "plan": "plan_summary",
    "quote": "quote_summary",
}


def plan_html(plan: Plan | None):
    """A plan as the operator reads it: its chips, speed and money in ¥, then one line per rank."""
    if plan is None:
        return "—"
    facts = gettext(
        "%(chips)s · %(speed)s tokens/s · %(price)s/h · %(per_million)s per million tokens · ETA %(eta)s · total"
    ) % {
        "chips": plan.describe(),
        "speed": f"{plan.tokens_per_s:,.0f}",
        "price": format_money(plan.price_per_hour),
        "per_million": format_money(plan.price_per_million_tokens),
        "eta": format_duration(plan.eta_seconds),
    }
    rank_line = gettext("rank %(number)s: %(chip)s on %(host)s, micro-batch %(batch)s, %(mode)s%(simulated)s")
    rank_line %= {key: f"{{{key}}}" for key in ("number", "chip", "host", "batch", "mode", "simulated")}
    ranks = format_html_join(
        "",
        "<li>{}</li>",
        (
            (
                format_html(
                    rank_line,
                    number=number,
                    chip=rank.chip,
                    host=rank.hostname,
                    batch=rank.micro_batch,
                    mode=rank.mode.replace("_", "-"),
                    simulated=simulated(rank),
                ),
            )
            for number, rank in enumerate(plan.ranks)
        ),
    )
    return format_html('<p>{} {}</p><ul class="plan-ranks">{}</ul>', facts, money_html(plan.total_cost), ranks)


def simulated(rank) -> str:
    return gettext(" (simulated)") if rank.simulated else ""


class CancelReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        label=gettext_lazy("Reason"),
        help_text=gettext_lazy("The owner reads it on the job page and in the e-mail the cancel sends."),
    )


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs are read-only here (no Save, no Delete); the one thing the console does to a job is cancel it.

    Cancelling goes through `lifecycle.cancel`, as the owner's Cancel button does: a job waiting for
    chips ends at once, a running one is told to stop and ends cancelled when its ranks exit.
    """

    list_display = [
        "id",
        "owner",
        "model_name",
        "status",
        "step",
        "max_steps",
        "policy",
        "epoch",
        zoned(Job, "created_at"),
    ]
    list_filter = ["status", "policy", "model_name"]
    search_fields = ["owner__username", "name", "model_name"]
    fields = [JOB_DISPLAY_FIELDS.get(f.name, f.name) for f in Job._meta.fields if f.name != "id"]
    readonly_fields = fields
    inlines = [AllocationInline]
    actions = ["cancel_selected"]
    change_form_template = "admin/fleet/job/change_form.html"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_cancel_permission(self, request, obj=None) -> bool:
        """Whoever may change jobs may cancel them; the page stays read-only for everyone."""
        return request.user.has_perm("fleet.change_job")

    @admin.display(description=gettext_lazy("Budget per hour"))
    def budget_per_hour(self, job: Job) -> str:
        return f"{format_price(job.max_budget_per_hour)}/h"

    @admin.display(description=gettext_lazy("Total budget"))
    def total_budget_money(self, job: Job):
        return money_html(job.total_budget)

    @admin.display(description=gettext_lazy("Spot bid /chip-h"))
    def spot_bid(self, job: Job) -> str:
        return format_price(job.spot_bid_per_hour)

    @admin.display(description=gettext_lazy("Credit held while waiting"))
    def credit_hold_money(self, job: Job):
        return money_html(job.credit_hold)

    @admin.display(description=gettext_lazy("Plan"))
    def plan_summary(self, job: Job):
        return plan_html(job.plan)

    @admin.display(description=gettext_lazy("Quoted at launch"))
    def quote_summary(self, job: Job):
        return plan_html(job.quote)

    @admin.action(description=gettext_lazy("Cancel selected jobs…"), permissions=["cancel"])
    def cancel_selected(self, request, queryset) -> TemplateResponse | None:
        """First a page asking why (the reason goes to each owner); the jobs are cancelled once it is sent."""
        confirmed = "reason" in request.POST
        form = CancelReasonForm(request.POST if confirmed else None)
        if not form.is_valid():
            return self._confirmation(request, list(queryset.order_by("pk")), form, status=400 if confirmed else 200)
        for job in queryset.order_by("pk"):
            self._cancel(request, job, form.cleaned_data["reason"])
        return None

    def get_urls(self):
        cancel = self.admin_site.admin_view(self.cancel_view)
        return [path("<int:pk>/cancel/", cancel, name="fleet_job_cancel"), *super().get_urls()]

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The Cancel button on a job's page: the page asking why (GET), then the cancel (POST) and back."""
        if not self.has_cancel_permission(request):
            return HttpResponse(gettext("You may not cancel jobs."), status=403)
        job = get_object_or_404(Job, pk=pk)
        form = CancelReasonForm(request.POST if request.method == "POST" else None)
        if not form.is_valid():
            return self._confirmation(request, [job], form, status=400 if request.method == "POST" else 200)
        self._cancel(request, job, form.cleaned_data["reason"])
        return HttpResponseRedirect(reverse("admin:fleet_job_change", args=[pk]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = Job.objects.filter(pk=object_id).only("status", "cancel_requested_at").first()
        can_cancel = (
            job is not None
            and not job.is_finished
            and job.cancel_requested_at is None
            and self.has_cancel_permission(request)
        )
        extra_context = {**(extra_context or {}), "can_cancel": can_cancel}
        return super().change_view(request, object_id, form_url, extra_context)

    def _confirmation(self, request, jobs: list[Job], form: CancelReasonForm, status: int) -> TemplateResponse:
        """The page that asks for the reason: which jobs, what happens to each, and the reason's field."""
        context = {
            **self.admin_site.each_context(request),
            "title": ngettext("Cancel %(count)s job?", "Cancel %(count)s jobs?", len(jobs)) % {"count": len(jobs)},
            "jobs": jobs,
            "live": [job for job in jobs if not job.is_finished and job.cancel_requested_at is None],
            "form": form,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "from_action": "action" in request.POST,
        }
        return TemplateResponse(request, CONFIRMATION, context, status=status)

    def _cancel(self, request, job: Job, reason: str) -> None:
        """Cancel one job through the lifecycle, with its audit entry in the same transaction, and say what happened."""
        if job.is_finished:
            ended = gettext("Job %(id)s had already ended (%(status)s): nothing to cancel.")
            self.message_user(request, ended % {"id": job.pk, "status": job.get_status_display().lower()})
            return
        if job.cancel_requested_at:
            already = gettext("Job %(id)s is already being cancelled (%(status)s).")
            self.message_user(request, already % {"id": job.pk, "status": job.get_status_display().lower()})
            return
        status_before = job.status
        with transaction.atomic():
            job = lifecycle.cancel(job, operator_reason=reason)
            record(
                request.user,
                "job.cancel",
                job,
                owner=job.owner,
                reason=reason,
                before={"status": status_before},
                after={"status": job.status},
            )
        if job.status == JobStatus.CANCELLED:
            told = gettext(
                "Cancelled job %(id)s of %(owner)s: it was not running on chips, so it ended at once. "
                "The owner is told why on the job page and by e-mail."
            )
        else:
            told = gettext(
                "Cancelling job %(id)s of %(owner)s: its ranks were told to stop; it ends cancelled when they exit. "
                "The owner is told why on the job page and by e-mail."
            )
        self.message_user(request, told % {"id": job.pk, "owner": job.owner}, messages.SUCCESS)
