"""How a launch names a stored object: "store:<key>" (a dataset file, a model folder, a checkpoint),
as opposed to a catalog name or a local path. The platform writes these; the runtime stages them."""

from __future__ import annotations

STORED = "store:"


def is_stored(value: str | None) -> bool:
    return bool(value) and value.startswith(STORED)


def key_of(value: str) -> str:
    return value[len(STORED) :].strip("/")


def stored(key: str) -> str:
    return STORED + key
