"""The platform's object store (STORAGE_URL) and the web host's staging cache for reading from it."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext as _

from kernel.storage import StorageError, Store, open_store
from kernel.storage.cache import StagingCache
from kernel.storage.trees import delete_tree

logger = logging.getLogger(__name__)


class StorageUnavailable(Exception):
    """Object storage failed while keeping a user's upload; nothing was kept (the API answers 503)."""

    def __init__(self, what: str):
        """`what`: the upload, in the request's language ("The dataset")."""
        super().__init__(
            _("%(what)s could not be stored right now (object storage is unavailable); try again shortly.")
            % {"what": what}
        )


@cache
def _store(url: str) -> Store:
    return open_store(url)


def platform_store() -> Store:
    """Where datasets, models, checkpoints and artifacts are kept (one client per URL per process)."""
    return _store(settings.STORAGE_URL)


def web_cache() -> StagingCache:
    """The web host's local copies of stored trees it must read (tokenizers for previews, model configs)."""
    return StagingCache(Path(settings.STAGING_CACHE_DIR), settings.STAGING_CACHE_BYTES)


@contextmanager
def staged_tree(prefix: str, select: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """A stored tree's (selected) files in a temporary folder, linked from the web cache; gone afterwards.

    Raises StorageError when there is no such tree or a file doesn't match its manifest."""
    staging = web_cache()
    with tempfile.TemporaryDirectory(dir=staging.root, prefix="staged-") as folder:  # beside the objects: links
        staging.stage_tree(platform_store(), prefix, Path(folder), select)
        yield Path(folder)


def delete_stored_tree(prefix: str) -> None:
    """Delete a tree nothing refers to any more; a failure is logged (`manage.py storage_usage` shows what
    is left as unreferenced)."""
    try:
        delete_tree(platform_store(), prefix)
    except StorageError as error:
        logger.warning("could not delete %s from storage: %s", prefix, error)
