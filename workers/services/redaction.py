"""The platform's own server paths, kept out of what people read (job logs, a crashed rank's error, messages
built from a storage or file error).

Agents clean their ranks' lines on their host (hosts/agent/output.py), knowing their own folders; the
platform cleans again with the folders it knows, which are the demo agents' too under `make run`, and for an
agent that did not clean at all.
"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from kernel.logtext import PathScrubber, scrubber


def redact(text: str) -> str:
    """`text` with the data folder, runs, caches, the local store, the checkout and Python named, not shown."""
    return _scrubber(
        str(settings.DATA_DIR), str(settings.RUNS_ROOT), str(settings.STAGING_CACHE_DIR), settings.STORAGE_URL
    )(text)


@lru_cache(maxsize=4)
def _scrubber(data_dir: str, runs: str, cache: str, storage_url: str) -> PathScrubber:
    local_store = storage_url.removeprefix("file://") if storage_url.startswith("file://") else ""
    return scrubber({data_dir: "<data>", runs: "<runs>", cache: "<cache>", local_store: "<storage>"})
