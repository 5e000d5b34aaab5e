"""Admin console: the compute fleet (chip types, pools, nodes)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html

from billing.models import Price
from workers.models import Allocation, ChipType, EnrollmentToken, Job, Node, Pool


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
class ChipTypeAdmin(admin.ModelAdmin):
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
class PoolAdmin(admin.ModelAdmin):
    list_display = ["name", "chip_type", "zone", "chip_count"]
    list_filter = ["chip_type", "zone"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "hostname",
        "pool",
        "chips",
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


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(admin.ModelAdmin):
    """Operators create a token per pool and give it to a compute host's agent (shown once)."""

    list_display = ["name", "pool", "prefix", "uses", "created_at", "expires_at", "revoked_at"]
    list_filter = ["pool"]
    fields = ["pool", "name", "expires_at"]
    actions = ["revoke_selected"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request, obj: EnrollmentToken, form, change) -> None:
        token, raw = EnrollmentToken.issue(obj.pool, name=obj.name, created_by=request.user)
        if obj.expires_at:
            EnrollmentToken.objects.filter(pk=token.pk).update(expires_at=obj.expires_at)
        obj.pk = token.pk
        self.message_user(
            request,
            format_html(
                "Enrollment token for {} (shown once): <code>{}</code><br>Start an agent with "
                "<code>python -m workers.agent --platform {} --enrollment-token {}</code>",
                obj.pool,
                raw,
                request.build_absolute_uri("/").rstrip("/"),
                raw,
            ),
            messages.SUCCESS,
        )

    @admin.action(description="Revoke the selected enrollment tokens")
    def revoke_selected(self, request, queryset) -> None:
        queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


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
