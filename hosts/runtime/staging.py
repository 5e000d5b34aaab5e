"""Stored inputs and outputs of a rank: what `store:<key>` names in a launch file.

The platform names a rank's inputs by storage key when the hosts share no disk: a dataset file
(`store:datasets/7/<uuid>/data.jsonl`, a file of the tree that is its folder), a model folder
(`store:models/7/<uuid>`; a finished job's trained model: `model/` in its checkpoint tree), the checkpoint to
resume from (`store:checkpoints/job-5/step-40`) and where checkpoints go (`store:checkpoints/job-5`). A rank
reaches them with its launch's storage grant: URLs for exactly those objects, signed by the platform
(STARVERSE_PLATFORM_URL) on request (kernel/storage/grants.py);
the host holds no store credentials. Inputs are copied into the host's staging cache (STARVERSE_CACHE_DIR,
STARVERSE_CACHE_BYTES) once, verified against their manifests, and linked into the run folder, so a rank
reads only its own host's disk. A launch without a grant uses the store in STORAGE_URL (a host trusted with
the store itself: one-machine tests and benchmarks; the agent never passes one on). A plain path still means
a local file (one host, or a shared disk).
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kernel.protocol import PLATFORM_URL_ENV, RankLaunch
from kernel.storage import StorageError, Store, store_from_environment
from kernel.storage.cache import DEFAULT_CAP_BYTES, StagingCache
from kernel.storage.locations import is_stored, key_of

CACHE_DIR_ENV, CACHE_BYTES_ENV = "STARVERSE_CACHE_DIR", "STARVERSE_CACHE_BYTES"


@dataclass(frozen=True)
class HostStorage:
    store: Store
    cache: StagingCache


def host_storage(launch: RankLaunch) -> HostStorage:
    """The store this rank reaches (through its launch's grant) and its host's staging cache."""
    return storage_for_grant(launch.storage_grant or "")


@cache
def storage_for_grant(grant: str) -> HostStorage:
    """One store and cache per grant ("" : the STORAGE_URL store); fails, naming what is missing, without one."""
    if grant:
        from kernel.storage.grants import GrantStore  # httpx: only where a rank runs

        store: Store = GrantStore(os.environ.get(PLATFORM_URL_ENV, ""), grant)
    elif (store := store_from_environment()) is None:
        raise StorageError("the launch names stored inputs (store:…) but carries no storage grant")
    root = os.environ.get(CACHE_DIR_ENV) or str(Path.home() / ".cache" / "starverse")
    cap = int(os.environ.get(CACHE_BYTES_ENV) or DEFAULT_CAP_BYTES)
    return HostStorage(store, StagingCache(Path(root), cap))


def stage_inputs(launch: RankLaunch) -> RankLaunch:
    """The launch with its stored dataset, eval dataset and model folder replaced by local copies."""
    changes: dict = {}
    if is_stored(launch.dataset):
        changes["dataset"] = str(stage_file(launch, launch.dataset))
    if is_stored(launch.eval_dataset):
        changes["eval_dataset"] = str(stage_file(launch, launch.eval_dataset))
    if is_stored(launch.model.get("path")):
        changes["model"] = {**launch.model, "path": str(stage_model(launch, key_of(launch.model["path"])))}
    return dataclasses.replace(launch, **changes) if changes else launch


def stage_model(launch: RankLaunch, key: str) -> Path:
    """The model's tree, or with the launch's `model.folder` (a job's trained model: `model` inside a checkpoint
    tree) only that folder of it."""
    folder = launch.model.get("folder")
    if not folder:
        return stage_tree(launch, key)
    return stage_tree(launch, key, select=lambda member: member.startswith(folder + "/")) / folder


def stage_file(launch: RankLaunch, value: str) -> Path:
    """A stored file: its folder's tree, only that file linked in."""
    key = key_of(value)
    folder, name = posixpath.split(key)
    return stage_tree(launch, folder, select=lambda member: member == name) / name


def stage_tree(launch: RankLaunch, prefix: str, select=None) -> Path:
    storage = host_storage(launch)
    dest = Path(launch.run_dir) / "inputs" / _folder_name(prefix)
    storage.cache.stage_tree(storage.store, prefix, dest, select)
    return dest


def _folder_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key)
