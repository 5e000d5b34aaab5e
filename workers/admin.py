"""Admin console: the compute fleet (chip types, pools, nodes); each operator action is audited (base.audit)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import transaction
from django.utils import timezone
from django.utils.html import format_html

from base.admin import AuditedChangesMixin
from base.audit import record
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
    fields = ["effective_at", "on_demand_display", "spot_floor_display", "author", "note"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-effective_at", "-id"]
    verbose_name_plural = "price history (add a new price under Billing › Prices)"

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


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
            jobs = ", ".join(f"job {job_id}" for job_id in moved) or "no running jobs"
            self.message_user(
                request,
                f"{node.hostname} is draining; {jobs} given {notice} s notice to checkpoint and move.",
                messages.SUCCESS,
            )

    @admin.action(description="Drain (running jobs finish; nothing new is placed)")
    def drain(self, request, queryset) -> None:
        if not self._all_present(request, queryset, "drained"):
            return
        changed = self._move_status(request, queryset, AgentStatus.ONLINE, AgentStatus.DRAINING, "node.drain")
        self.message_user(
            request, f"{changed} node(s) draining: their running jobs finish, nothing new is placed.", messages.SUCCESS
        )

    @admin.action(description="Return drained nodes to service")
    def return_to_service(self, request, queryset) -> None:
        changed = self._move_status(
            request, queryset, AgentStatus.DRAINING, AgentStatus.ONLINE, "node.return_to_service"
        )
        self.message_user(request, f"{changed} node(s) back in service.", messages.SUCCESS)

    @admin.action(description="Reset node (revoke its node token, move its jobs; the next enrollment takes the host)")
    def reset_node(self, request, queryset) -> None:
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
        self.message_user(
            request,
            f"{queryset.count()} node(s) reset: their agents' node tokens no longer work and their jobs were moved. "
            "Each host may now enroll again with a usable enrollment token of its pool.",
            messages.SUCCESS,
        )

    def _move_status(self, request, queryset, before: str, after: str, action: str) -> int:
        """Each selected node in status `before` goes to `after`, with its audit entry; how many moved."""
        moved = 0
        for node in queryset.filter(agent_status=before).order_by("pk"):
            with transaction.atomic():
                if Node.objects.filter(pk=node.pk, agent_status=before).update(agent_status=after):
                    record(request.user, action, node, before={"agent_status": before}, after={"agent_status": after})
                    moved += 1
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
        for token in queryset.filter(revoked_at__isnull=True).order_by("pk"):
            with transaction.atomic():
                if EnrollmentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
                    record(request.user, "enrollment_token.revoke", token, pool=token.pool, prefix=token.prefix)


class AllocationInline(admin.TabularInline):
    model = Allocation
    fields = ["node", "chip_type", "chips", "mode", "epoch", "started_at", "ended_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
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
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [AllocationInline]

    def has_add_permission(self, request) -> bool:
        return False
