"""Admin pages for rows nobody edits by hand (ledger, payments, clearing prices, the audit log): look, never change.

`AuditedChangesMixin` records every add, change and delete made through an admin page in the audit log.
"""

from __future__ import annotations

from django.contrib import admin

from base.audit import changes, record
from base.formatting import format_when
from base.models import AuditEntry


def zoned(model, field: str):
    """A changelist column of a datetime field with its zone ("2026-12-07 14:05 UTC+8", in the operator's
    zone and language), sorted by the field; Django's own column shows the local time without its zone."""

    @admin.display(description=model._meta.get_field(field).verbose_name, ordering=field)
    def column(obj):
        return format_when(getattr(obj, field))

    column.__name__ = f"{field}_zoned"
    return column


class ReadOnlyMixin:
    """For a ModelAdmin or an inline: no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class AuditedChangesMixin:
    """For a ModelAdmin: each save through its form is an audit entry "<model>.create|change" with the
    changed fields before and after (never a password field); each delete one "<model>.delete"."""

    audit_name = ""  # the "<model>" part of the action; the model's name when empty

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        fields = [name for name in form.changed_data if "password" not in name]
        if change and not fields:
            return
        before = {name: form[name].initial for name in fields} if change else {}
        after = {name: form.cleaned_data.get(name) for name in fields}
        record(request.user, self._audit_action("change" if change else "create"), obj, **changes(before, after))

    def delete_model(self, request, obj) -> None:
        record(request.user, self._audit_action("delete"), obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            record(request.user, self._audit_action("delete"), obj)
        super().delete_queryset(request, queryset)

    def _audit_action(self, verb: str) -> str:
        return f"{self.audit_name or self.model._meta.model_name}.{verb}"


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """The audit log of operator actions: read-only, newest first."""

    list_display = [zoned(AuditEntry, "at"), "actor_name", "action", "target_type", "target_repr"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_name", "action", "target_repr", "target_id"]
    date_hierarchy = "at"
    fields = ["at", "actor", "actor_name", "action", "target_type", "target_id", "target_repr", "details"]
    readonly_fields = fields
