"""Admin console: the compute fleet (chip types, pools, nodes); each operator action is audited (base.audit).

Jobs are in workers/admin_jobs.py: read-only, cancellable with a reason.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db import transaction
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy, ngettext

from base.admin import AuditedChangesMixin, zoned
from base.audit import record
from billing.models import Price
from fleet.choices import AgentStatus
from fleet.models import ChipType, Node, Pool
from kernel.money import format_price
from market.models import MarketSettings
from workers import admin_jobs  # noqa: F401  (jobs: registered there, /admin/fleet/job/)
from workers.models import EnrollmentToken
from workers.services import node_lifecycle
from workers.services.node_lifecycle import NodeChange

# A node in one of these states has no agent to take notice or finish work: nothing to reclaim or drain.
GONE = {
    AgentStatus.LOST: gettext_lazy("lost"),
    AgentStatus.OFFLINE: gettext_lazy("offline"),
    AgentStatus.UNENROLLED: gettext_lazy("not enrolled"),
}


class PriceHistoryInline(admin.TabularInline):
    model = Price
    fields = ["effective_at", "on_demand", "spot_floor", "author", "note"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-effective_at", "-id"]
    verbose_name_plural = gettext_lazy("price history (add a new price under Billing › Prices)")

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=gettext_lazy("On-demand /chip-h"))
    def on_demand(self, price: Price) -> str:
        return format_price(price.on_demand_per_hour)

    @admin.display(description=gettext_lazy("Spot floor /chip-h"))
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
    list_display = ["name", "chip_type", "zone", "chips"]
    list_filter = ["chip_type", "zone"]
    inlines = [NodeInline]

    @admin.display(description=gettext_lazy("Chip count"))
    def chips(self, pool: Pool) -> int:
        return pool.chip_count()


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
        zoned(Node, "last_heartbeat_at"),
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

    @admin.action(
        description=gettext_lazy("Reclaim for maintenance (running jobs get notice and move; nothing new lands)")
    )
    def reclaim_for_maintenance(self, request, queryset) -> None:
        if not self._all_present(request, queryset, gettext("Nothing was reclaimed: %(gone)s.")):
            return
        notice = MarketSettings.load().notice_seconds
        for node in queryset.order_by("pk"):
            detail = f"{node.hostname} is going into maintenance (by {request.user.get_username()})"  # the jobs' event
            with transaction.atomic():
                change = node_lifecycle.reclaim_for_maintenance(node.pk, detail, notice)
                if change is None:  # lost or reset since the selection was checked: its jobs moved already
                    skipped = gettext("%(host)s is no longer connected: skipped.") % {"host": node.hostname}
                    self.message_user(request, skipped, messages.WARNING)
                    continue
                moved = change.jobs_moved
                record(request.user, "node.reclaim", node, **change.audit(), jobs_moved=moved, notice_seconds=notice)
            if moved:
                told = ngettext(
                    "Reclaimed %(host)s for maintenance: %(jobs)s has %(notice)s s to checkpoint and move; nothing "
                    "new is placed on it.",
                    "Reclaimed %(host)s for maintenance: %(jobs)s have %(notice)s s to checkpoint and move; nothing "
                    "new is placed on it.",
                    len(moved),
                ) % {"host": node.hostname, "jobs": _jobs(moved), "notice": notice}
            else:
                told = gettext(
                    "Reclaimed %(host)s for maintenance: no job was running on it; nothing new is placed on it."
                ) % {"host": node.hostname}
            self.message_user(request, told, messages.SUCCESS)

    @admin.action(description=gettext_lazy("Drain (running jobs finish; nothing new is placed)"))
    def drain(self, request, queryset) -> None:
        if not self._all_present(request, queryset, gettext("Nothing was drained: %(gone)s.")):
            return
        changed = self._move_status(request, queryset, node_lifecycle.drain, "node.drain")
        if not changed:
            nothing = gettext("Nothing was drained: only online nodes can be drained.")
            self.message_user(request, nothing, messages.WARNING)
            return
        self.message_user(
            request,
            gettext("Drained %(nodes)s: the jobs running there finish where they are; nothing new is placed there.")
            % {"nodes": _nodes(changed)},
            messages.SUCCESS,
        )

    @admin.action(description=gettext_lazy("Return drained nodes to service"))
    def return_to_service(self, request, queryset) -> None:
        changed = self._move_status(request, queryset, node_lifecycle.return_to_service, "node.return_to_service")
        if not changed:
            self.message_user(
                request, gettext("Nothing was returned to service: only draining nodes can return."), messages.WARNING
            )
            return
        self.message_user(
            request,
            gettext("Returned %(nodes)s to service: new jobs may be placed there again.") % {"nodes": _nodes(changed)},
            messages.SUCCESS,
        )

    @admin.action(
        description=gettext_lazy(
            "Reset node (revoke its node token, move its jobs; the next enrollment takes the host)"
        )
    )
    def reset_node(self, request, queryset) -> None:
        reset = []
        for node in queryset.order_by("pk"):
            with transaction.atomic():
                change = node_lifecycle.reset_node(node.pk, by=request.user.get_username())
                record(request.user, "node.reset", node, **change.audit())
            reset.append(node.hostname)
        self.message_user(
            request,
            gettext(
                "Reset %(nodes)s: the old node token no longer works and the jobs there were moved. "
                "Each host may enroll again with a usable enrollment token of its pool."
            )
            % {"nodes": _nodes(reset)},
            messages.SUCCESS,
        )

    def _move_status(self, request, queryset, transition: Callable[[int], NodeChange | None], action: str) -> list[str]:
        """Each selected node goes through `transition` (node_lifecycle.drain, return_to_service), with its
        audit entry where it moved; the hostnames moved."""
        moved = []
        for node in queryset.order_by("pk"):
            with transaction.atomic():
                change = transition(node.pk)
                if change is not None:
                    record(request.user, action, node, **change.audit())
                    moved.append(node.hostname)
        return moved

    def _all_present(self, request, queryset, nothing: str) -> bool:
        """Refuse the whole selection when a node is already gone: nothing half-done. `nothing` says what
        was not done ("Nothing was drained: %(gone)s.")."""
        gone = [
            gettext("%(host)s is %(state)s") % {"host": node.hostname, "state": GONE[node.agent_status]}
            for node in queryset
            if node.agent_status in GONE
        ]
        if gone:
            why = gettext(
                "A node without a connected agent has no running work to give notice to (a lost node's jobs are "
                "moved automatically). Deselect it and retry."
            )
            self.message_user(request, f"{nothing % {'gone': '; '.join(gone)}} {why}", messages.ERROR)
        return not gone


def _nodes(hostnames: list[str]) -> str:
    """ "host-2 (1 node)", "host-2, host-3 (2 nodes)": what an action changed, named."""
    count = ngettext("%(count)s node", "%(count)s nodes", len(hostnames)) % {"count": len(hostnames)}
    return f"{', '.join(hostnames)} ({count})"


def _jobs(job_ids: list[int]) -> str:
    """ "job 4", "jobs 4, 7 and 9"."""
    if len(job_ids) == 1:
        return gettext("job %(id)s") % {"id": job_ids[0]}
    return gettext("jobs %(ids)s and %(last)s") % {"ids": ", ".join(str(j) for j in job_ids[:-1]), "last": job_ids[-1]}


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
        zoned(EnrollmentToken, "created_at"),
        zoned(EnrollmentToken, "expires_at"),
        zoned(EnrollmentToken, "revoked_at"),
    ]
    list_filter = ["pool"]
    fields = ["pool", "name", "approved_chips", "max_uses", "expires_at", "uses"]
    readonly_fields = ["uses"]
    actions = ["revoke_selected"]

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        return ["pool", "uses"] if obj is not None else ["uses"]

    @admin.display(description=gettext_lazy("uses"))
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
                gettext(
                    "Enrollment token for {pool} (shown once): <code>{token}</code><br>Save it in a file only the "
                    "agent's user can read (<code>chmod 600</code>) and start the agent with <code>python -m "
                    "hosts.agent --platform {platform} --enrollment-token-file PATH</code> (or pass it in the "
                    "environment variable <code>STARVERSE_ENROLLMENT_TOKEN</code>; never on the command line)."
                ),
                pool=obj.pool,
                token=raw,
                platform=request.build_absolute_uri("/").rstrip("/"),
            ),
            messages.SUCCESS,
        )

    @admin.action(description=gettext_lazy("Revoke the selected enrollment tokens"))
    def revoke_selected(self, request, queryset) -> None:
        now = timezone.now()
        revoked = []
        for token in queryset.filter(revoked_at__isnull=True).order_by("pk"):
            with transaction.atomic():
                if EnrollmentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
                    record(request.user, "enrollment_token.revoke", token, pool=token.pool, prefix=token.prefix)
                    revoked.append(f"{token.name or token.prefix} ({token.pool})")
        if not revoked:
            nothing = gettext("Nothing was revoked: the selected tokens were revoked already.")
            self.message_user(request, nothing, messages.INFO)
            return
        told = ngettext(
            "Revoked %(count)s enrollment token: %(tokens)s. No new host can enroll with them; hosts already "
            "enrolled keep working.",
            "Revoked %(count)s enrollment tokens: %(tokens)s. No new host can enroll with them; hosts already "
            "enrolled keep working.",
            len(revoked),
        ) % {"count": len(revoked), "tokens": ", ".join(revoked)}
        self.message_user(request, told, messages.SUCCESS)
