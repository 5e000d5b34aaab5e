"""Admin pages for rows nobody edits by hand (ledger, payments, clearing prices): look, never change."""

from __future__ import annotations


class ReadOnlyMixin:
    """For a ModelAdmin or an inline: no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
