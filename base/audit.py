"""The audit log of operator actions: `record(actor, action, target, **details)` appends one entry.

Entries are only ever added: the admin shows them read-only (base.admin.AuditEntryAdmin). Call
`record` inside the transaction that makes the change, so the entry and the change commit together.
Actions are "<thing>.<verb>" strings, e.g. "node.drain", "price.add", "credit.adjust".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models

from base.models import AuditEntry

REPR_LIMIT = 200


def record(actor, action: str, target: models.Model | None = None, **details: Any) -> AuditEntry:
    """Append one entry; `actor` is the acting user (None: the platform itself), `details` JSON-able facts."""
    acting = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        actor=acting,
        actor_name=acting.get_username() if acting is not None else "",
        action=action,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None and target.pk is not None else "",
        target_repr=str(target)[:REPR_LIMIT] if target is not None else "",
        details={name: plain(value) for name, value in details.items()},
    )


def already_recorded(action: str, **details: Any) -> bool:
    """Whether an entry of `action` with these detail values exists (a replayed form records nothing twice)."""
    lookups = {f"details__{name}": plain(value) for name, value in details.items()}
    return AuditEntry.objects.filter(action=action, **lookups).exists()


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{"before": {...}, "after": {...}} of the names whose value differs."""
    names = [name for name in after if plain(before.get(name)) != plain(after[name])]
    return {
        "before": {name: plain(before.get(name)) for name in names},
        "after": {name: plain(after[name]) for name in names},
    }


def plain(value: Any) -> Any:
    """A value the audit log can store as JSON: rows become their text, collections lists/dicts of plain values."""
    if isinstance(value, models.Model):
        return str(value)[:REPR_LIMIT]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, models.QuerySet | list | tuple | set | frozenset):
        return [plain(item) for item in value]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [plain(item) for item in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # datetimes, decimals, enums, UUIDs: their text, as the admin shows them
