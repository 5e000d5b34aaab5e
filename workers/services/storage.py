"""The platform's object store (STORAGE_URL) and the web host's staging cache for reading from it."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from django.conf import settings

from workers.storage import Store, open_store
from workers.storage.cache import StagingCache


@cache
def _store(url: str) -> Store:
    return open_store(url)


def platform_store() -> Store:
    """Where datasets, models, checkpoints and artifacts are kept (one client per URL per process)."""
    return _store(settings.STORAGE_URL)


def web_cache() -> StagingCache:
    """The web host's local copies of stored trees it must read (tokenizers for previews, model configs)."""
    return StagingCache(Path(settings.STAGING_CACHE_DIR), settings.STAGING_CACHE_BYTES)
