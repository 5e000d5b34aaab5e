"""Admin console: the compute fleet (chip types, pools, nodes)."""

from __future__ import annotations

from django.contrib import admin

from billing.models import Price
from workers.models import ChipType, Node, Pool


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
    list_display = ["name", "slug", "vendor", "family", "memory_gib", "bf16_tflops", "software_stack", "default_mfu"]
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
    list_display = ["hostname", "pool", "chips", "agent_status", "simulated", "spot_eligible", "last_heartbeat_at"]
    list_filter = ["pool__chip_type", "agent_status", "simulated", "spot_eligible"]
    search_fields = ["hostname"]
    readonly_fields = ["agent_status", "last_heartbeat_at", "created_at"]
