"""Admin console: the compute fleet (chip types, pools, nodes) and jobs; each operator action is audited (base.audit).

Jobs are the users' own: the console shows them read-only (money as ¥ amounts) and may only cancel
them, through the same lifecycle path as the owner's Cancel button.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from base.admin import AuditedChangesMixin
from base.audit import record
from base.money import format_price
from base.templatetags.money import money_html
from billing.models import Price
from market.models import MarketSettings
from workers.choices import AgentStatus, JobStatus
from workers.models import Allocation, ChipType, EnrollmentToken, Job, MigrationReason, Node, Pool
from workers.services import lifecycle
from workers.services.monitor import reset_node

# A node in one of these states has no agent to take notice or finish work: nothing to reclaim or drain.
GONE = {AgentStatus.LOST: "lost", AgentStatus.OFFLINE: "offline", AgentStatus.UNENROLLED: "not enrolled"}


class PriceHistoryInline(admin.TabularInline):
    model = Price
    fields = ["effective_at", "on_demand", "spot_floor", "author", "note"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-effective_at", "-id"]
    verbose_name_plural = "price history (add a new price under Billing › Prices)"

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="On-demand /chip-h")
    def on_demand(self, price: Price) -> str:
        return format_price(price.on_demand_per_hour)

    @admin.display(description="Spot floor /chip-h")
    def spot_floor(self, price: Price) -> str:
        return format_price(price.spot_floor_per_hour)


@admin.register(ChipType)
class ChipTypeAdmin(AuditedChangesMixin, admin.ModelAdmin):
    audit_name = "chip_type"
    list_display = [
        "name",
        "slug",
        "vendor",
        "family",
        "memory_gib",
        "bf16_tflops",
        "software_stack",
        "default_mfu",
    ]
    list_filter = ["family", "software_stack"]
    search_fields = ["slug", "name", "vendor"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [PriceHistoryInline]


class NodeInline(admin.TabularInline):
    model = Node
    fields = ["hostname", "chips", "agent_status", "simulated", "spot_eligible", "last_heartbeat_at"]
    readonly_fields = ["agent_status", "last_heartbeat_at"]
    extra = 0


@admin.register(Pool)
class PoolAdmin(AuditedChangesMixin, admin.ModelAdmin):
    list_display = ["name", "chip_type", "zone", "chip_count"]
    list_filter = ["chip_type", "zone"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(AuditedChangesMixin, admin.ModelAdmin):
    list_display = [
        "hostname",
        "pool",
        "chips",
        "approved_chips",
        "agent_status",
        "simulated",
        "spot_eligible",
        "last_heartbeat_at",
    ]
    list_filter = ["pool__chip_type", "agent_status", "simulated", "spot_eligible"]
    search_fields = ["hostname"]
    readonly_fields = [
        "agent_status",
        "last_heartbeat_at",
        "created_at",
        "address",
        "devices",
        "health",
        "agent_version",
        "enrolled_at",
    ]
    actions = ["reclaim_for_maintenance", "drain", "return_to_service", "reset_node"]

    @admin.action(description="Reclaim for maintenance (running jobs get notice and move; nothing new lands)")
    def reclaim_for_maintenance(self, request, queryset) -> None:
        if not self._all_present(request, queryset, "reclaimed"):
            return
        notice = MarketSettings.load().notice_seconds
        for node in queryset.order_by("pk"):
            with transaction.atomic():
                node = Node.objects.select_for_update().get(pk=node.pk)
                status_before = node.agent_status
                node.agent_status = AgentStatus.DRAINING
                node.save(update_fields=["agent_status"])
                detail = f"{node.hostname} is going into maintenance (by {request.user.get_username()})"
                moved = [
                    job_id
                    for job_id in running_job_ids(node)
                    if lifecycle.reclaim(
                        job_id, MigrationReason.MAINTENANCE, detail, nodes=[node], notice_seconds=notice
                    )
                ]
                record(
                    request.user,
                    "node.reclaim",
                    node,
                    before={"agent_status": status_before},
                    after={"agent_status": node.agent_status},
                    jobs_moved=moved,
                    notice_seconds=notice,
                )
            if moved:
                jobs = f"{_jobs(moved)} {'has' if len(moved) == 1 else 'have'} {notice} s to checkpoint and move"
            else:
                jobs = "no job was running on it"
            self.message_user(
                request,
                f"Reclaimed {node.hostname} for maintenance: {jobs}; nothing new is placed on it.",
                messages.SUCCESS,
            )

    @admin.action(description="Drain (running jobs finish; nothing new is placed)")
    def drain(self, request, queryset) -> None:
        if not self._all_present(request, queryset, "drained"):
            return
        changed = self._move_status(request, queryset, AgentStatus.ONLINE, AgentStatus.DRAINING, "node.drain")
        if not changed:
            self.message_user(request, "Nothing was drained: only online nodes can be drained.", messages.WARNING)
            return
        self.message_user(
            request,
            f"Drained {_nodes(changed)}: the jobs running there finish where they are; nothing new is placed there.",
            messages.SUCCESS,
        )

    @admin.action(description="Return drained nodes to service")
    def return_to_service(self, request, queryset) -> None:
        changed = self._move_status(
            request, queryset, AgentStatus.DRAINING, AgentStatus.ONLINE, "node.return_to_service"
        )
        if not changed:
            self.message_user(
                request, "Nothing was returned to service: only draining nodes can return.", messages.WARNING
            )
            return
        self.message_user(
            request, f"Returned {_nodes(changed)} to service: new jobs may be placed there again.", messages.SUCCESS
        )

    @admin.action(description="Reset node (revoke its node token, move its jobs; the next enrollment takes the host)")
    def reset_node(self, request, queryset) -> None:
        reset = []
        for node in queryset.order_by("pk"):
            with transaction.atomic():
                status_before = node.agent_status
                reset_node(node, by=request.user.get_username())
                node.refresh_from_db(fields=["agent_status"])
                record(
                    request.user,
                    "node.reset",
                    node,
                    before={"agent_status": status_before},
                    after={"agent_status": node.agent_status},
                )
            reset.append(node.hostname)
        self.message_user(
            request,
            f"Reset {_nodes(reset)}: the old node token no longer works and the jobs there were moved. "
            "Each host may enroll again with a usable enrollment token of its pool.",
            messages.SUCCESS,
        )

    def _move_status(self, request, queryset, before: str, after: str, action: str) -> list[str]:
        """Each selected node in status `before` goes to `after`, with its audit entry; the hostnames moved."""
        moved = []
        for node in queryset.filter(agent_status=before).order_by("pk"):
            with transaction.atomic():
                if Node.objects.filter(pk=node.pk, agent_status=before).update(agent_status=after):
                    record(request.user, action, node, before={"agent_status": before}, after={"agent_status": after})
                    moved.append(node.hostname)
        return moved

    def _all_present(self, request, queryset, verb: str) -> bool:
        """Refuse the whole selection when a node is already gone: nothing half-done."""
        gone = [f"{node.hostname} is {GONE[node.agent_status]}" for node in queryset if node.agent_status in GONE]
        if gone:
            self.message_user(
                request,
                f"Nothing was {verb}: {'; '.join(gone)}. A node without a connected agent has no running "
                "work to give notice to (a lost node's jobs are moved automatically). Deselect it and retry.",
                messages.ERROR,
            )
        return not gone


def _nodes(hostnames: list[str]) -> str:
    """ "host-2 (1 node)", "host-2, host-3 (2 nodes)": what an action changed, named."""
    return f"{', '.join(hostnames)} ({len(hostnames)} node{'s' if len(hostnames) != 1 else ''})"


def _jobs(job_ids: list[int]) -> str:
    """ "job 4", "jobs 4, 7 and 9"."""
    if len(job_ids) == 1:
        return f"job {job_ids[0]}"
    return f"jobs {', '.join(str(j) for j in job_ids[:-1])} and {job_ids[-1]}"


def running_job_ids(node: Node) -> list[int]:
    """Jobs with chips on this node now that are placed or running (a migrating job is already moving)."""
    return sorted(
        set(
            Allocation.objects.open()
            .filter(node=node, job__status__in=[JobStatus.PROVISIONING, JobStatus.RUNNING])
            .values_list("job_id", flat=True)
        )
    )


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(AuditedChangesMixin, admin.ModelAdmin):
    """Operators create a token per pool and give it to a compute host's agent (shown once).

    A token enrolls at most `max_uses` hosts, each with at most `approved_chips` chips, until it expires.
    """

    audit_name = "enrollment_token"

    list_display = [
        "name",
        "pool",
        "prefix",
        "uses_of_limit",
        "approved_chips",
        "created_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["pool"]
    fields = ["pool", "name", "approved_chips", "max_uses", "expires_at", "uses"]
    readonly_fields = ["uses"]
    actions = ["revoke_selected"]

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        return ["pool", "uses"] if obj is not None else ["uses"]

    @admin.display(description="uses")
    def uses_of_limit(self, obj: EnrollmentToken) -> str:
        return f"{obj.uses} / {obj.max_uses}"

    def save_model(self, request, obj: EnrollmentToken, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = EnrollmentToken.issue(
            obj.pool, chips=obj.approved_chips, max_uses=obj.max_uses, name=obj.name, created_by=request.user
        )
        EnrollmentToken.objects.filter(pk=token.pk).update(expires_at=obj.expires_at)
        obj.pk = token.pk
        record(
            request.user,
            "enrollment_token.create",
            token,
            pool=obj.pool,
            prefix=token.prefix,
            approved_chips=obj.approved_chips,
            max_uses=obj.max_uses,
            expires_at=obj.expires_at,
        )
        self.message_user(
            request,
            format_html(
                "Enrollment token for {} (shown once): <code>{}</code><br>Save it in a file only the agent's "
                "user can read (<code>chmod 600</code>) and start the agent with <code>python -m workers.agent "
                "--platform {} --enrollment-token-file PATH</code> (or pass it in the environment variable "
                "<code>STARVERSE_ENROLLMENT_TOKEN</code>; never on the command line).",
                obj.pool,
                raw,
                request.build_absolute_uri("/").rstrip("/"),
            ),
            messages.SUCCESS,
        )

    @admin.action(description="Revoke the selected enrollment tokens")
    def revoke_selected(self, request, queryset) -> None:
        now = timezone.now()
        revoked = []
        for token in queryset.filter(revoked_at__isnull=True).order_by("pk"):
            with transaction.atomic():
                if EnrollmentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
                    record(request.user, "enrollment_token.revoke", token, pool=token.pool, prefix=token.prefix)
                    revoked.append(f"{token.name or token.prefix} ({token.pool})")
        if not revoked:
            self.message_user(request, "Nothing was revoked: the selected tokens were revoked already.", messages.INFO)
            return
        self.message_user(
            request,
            f"Revoked {len(revoked)} enrollment token{'s' if len(revoked) != 1 else ''}: {', '.join(revoked)}. "
            "No new host can enroll with them; hosts already enrolled keep working.",
            messages.SUCCESS,
        )


class AllocationInline(admin.TabularInline):
    model = Allocation
    fields = ["node", "chip_type", "chips", "mode", "epoch", "started_at", "ended_at", "charged"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="Charged")
    def charged(self, allocation: Allocation):
        """An allocation's own total once it ended and the meter folded it into its billing line (the
        job's chips of that type and mode); until then it is billed with the line."""
        if allocation.ended_at is None or allocation.billed_through <= allocation.ended_at - timedelta(seconds=1):
            return "billed with its line"
        return money_html(allocation.charged_total)


# The job's money fields, shown as ¥ amounts by the JobAdmin methods of these names.
JOB_MONEY_FIELDS = {
    "max_budget_per_hour": "budget_per_hour",
    "total_budget": "total_budget_money",
    "spot_bid_per_hour": "spot_bid",
    "credit_hold": "credit_hold_money",
}


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
        "created_at",
    ]
    list_filter = ["status", "policy", "model_name"]
    search_fields = ["owner__username", "name", "model_name"]
    fields = [JOB_MONEY_FIELDS.get(f.name, f.name) for f in Job._meta.fields if f.name != "id"]
    readonly_fields = fields
    inlines = [AllocationInline]
    actions = ["cancel_selected"]
    change_form_template = "admin/workers/job/change_form.html"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_cancel_permission(self, request, obj=None) -> bool:
        """Whoever may change jobs may cancel them; the page stays read-only for everyone."""
        return request.user.has_perm("workers.change_job")

    @admin.display(description="Budget per hour")
    def budget_per_hour(self, job: Job) -> str:
        return f"{format_price(job.max_budget_per_hour)}/h"

    @admin.display(description="Total budget")
    def total_budget_money(self, job: Job):
        return money_html(job.total_budget)

    @admin.display(description="Spot bid /chip-h")
    def spot_bid(self, job: Job) -> str:
        return format_price(job.spot_bid_per_hour)

    @admin.display(description="Credit held while waiting")
    def credit_hold_money(self, job: Job):
        return money_html(job.credit_hold)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_selected(self, request, queryset) -> None:
        for job in queryset.order_by("pk"):
            self._cancel(request, job)

    def get_urls(self):
        cancel = self.admin_site.admin_view(self.cancel_view)
        return [path("<int:pk>/cancel/", cancel, name="workers_job_cancel"), *super().get_urls()]

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The Cancel button on a job's page (POST only), then back to that page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"], "Cancel a job with the button on its page (a POST).")
        if not self.has_cancel_permission(request):
            return HttpResponse("You may not cancel jobs.", status=403)
        self._cancel(request, get_object_or_404(Job, pk=pk))
        return HttpResponseRedirect(reverse("admin:workers_job_change", args=[pk]))

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

    def _cancel(self, request, job: Job) -> None:
        """Cancel one job through the lifecycle, with its audit entry in the same transaction, and say what happened."""
        if job.is_finished:
            self.message_user(
                request, f"Job {job.pk} had already ended ({job.get_status_display().lower()}): nothing to cancel."
            )
            return
        if job.cancel_requested_at:
            self.message_user(request, f"Job {job.pk} is already being cancelled ({job.get_status_display().lower()}).")
            return
        status_before = job.status
        with transaction.atomic():
            job = lifecycle.cancel(job)
            record(
                request.user,
                "job.cancel",
                job,
                owner=job.owner,
                before={"status": status_before},
                after={"status": job.status},
            )
        if job.status == JobStatus.CANCELLED:
            told = f"Cancelled job {job.pk} of {job.owner}: it was not running on chips, so it ended at once."
        else:
            told = (
                f"Cancelling job {job.pk} of {job.owner}: its ranks were told to stop; "
                "it ends cancelled when they exit."
            )
        self.message_user(request, told, messages.SUCCESS)
