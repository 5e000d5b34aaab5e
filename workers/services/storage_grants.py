"""Storage grants: what compute hosts get instead of the store's credentials (#28, RELIABILITY.md 37).

Hosts are third parties. The platform alone holds STORAGE_URL's credentials; each START command carries a
grant for one job epoch on one node: a token, signed with the platform's secret key, that names the job,
the epoch, the node and the trees the placement reads (its dataset, its eval set, its model, the checkpoint
it resumes from). With it a rank asks `POST /api/v1/agent/storage/` (kernel/protocol.py, section 4) for
URLs, each good for one object and STORAGE_GRANT_URL_TTL_S. The platform signs:

- GET for keys in those trees and under the job's own checkpoints (`checkpoints/job-<id>/`),
- PUT (and multipart uploads) only under the job's own checkpoints, and for a continuation resuming from its
  previous job's checkpoint, that tree's universal/ form (the first resume on another world converts it once
  and stores it beside the checkpoint: `hosts/runtime/checkpoint.prepare`),

and only while the job is still at that epoch and active, on a node that holds chips of it. A stale or
ended placement's grant is refused (409), any other key too (403), so a host reaches nothing but the
objects of the jobs placed on it, for as long as they are placed there. The kernel/storage/grants.py
GrantStore is the host's side.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from django.conf import settings
from django.core import signing

from fleet.choices import JobStatus
from fleet.models import Allocation, Job, Node
from kernel.protocol import STORAGE_GRANT_PREFIX, RankLaunch
from kernel.storage import StorageError, check_key
from kernel.storage.locations import is_stored, key_of
from workers.services.checkpoints import UNIVERSAL, job_checkpoints
from workers.services.storage import platform_store

SALT = "starverse.storage-grant"
UPLOAD_TTL_S = 6 * 3600  # a multipart upload's part URLs: a large model's states take a while to send


class GrantRefused(Exception):
    """The request is refused: `status` and `code` are the answer's, `errors` names the keys."""

    def __init__(self, status: int, code: str, message: str, errors: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.errors = status, code, errors or {}

    def body(self) -> dict:
        return {"detail": str(self), "code": self.code, **({"errors": self.errors} if self.errors else {})}


@dataclass(frozen=True)
class Grant:
    job_id: int
    epoch: int
    node_id: int
    reads: tuple[str, ...]  # the trees the placement reads, besides its job's checkpoints
    writes: tuple[str, ...] = ()  # trees it may write besides its job's checkpoints: a start checkpoint's universal/

    @property
    def checkpoints(self) -> str:
        return job_checkpoints(self.job_id)

    def allows(self, method: str, key: str) -> bool:
        prefixes = (self.checkpoints, *self.writes) if method != "GET" else (*self.reads, self.checkpoints)
        return any(key == prefix or key.startswith(prefix + "/") for prefix in prefixes)


def issue_grant(job: Job, node: Node, launch: RankLaunch) -> str:
    """The grant of `launch`'s rank on `node` (every rank of a node gets the same one)."""
    body = {"j": job.pk, "e": job.epoch, "n": node.pk, "r": sorted(set(trees_read(launch)))}
    if writes := trees_written(job, launch):
        body["w"] = writes
    return STORAGE_GRANT_PREFIX + signing.dumps(body, salt=SALT, compress=True)


def trees_read(launch: RankLaunch) -> list[str]:
    """The stored trees a launch names: its dataset's and eval set's folders, its model, its resume point."""
    files = [value for value in (launch.dataset, launch.eval_dataset) if is_stored(value)]
    trees = [value for value in (launch.model.get("path"), launch.resume_from) if is_stored(value)]
    return [posixpath.dirname(key_of(value)) for value in files] + [key_of(value) for value in trees]


def trees_written(job: Job, launch: RankLaunch) -> list[str]:
    """Besides the job's own checkpoints: the universal/ form of a start checkpoint of another job (placement
    names one only for a continuation, from a checkpoint of its owner's previous job)."""
    if not is_stored(launch.resume_from):
        return []
    key = key_of(launch.resume_from)
    own = job_checkpoints(job.pk)
    return [] if key == own or key.startswith(own + "/") else [f"{key}/{UNIVERSAL}"]


def read_grant(token: str) -> Grant:
    """The grant a token carries; 401 unless the platform signed it."""
    try:
        body = signing.loads(token.removeprefix(STORAGE_GRANT_PREFIX), salt=SALT)
        reads, writes = (tuple(str(tree) for tree in body.get(name, ())) for name in ("r", "w"))
        return Grant(int(body["j"]), int(body["e"]), int(body["n"]), reads, writes)
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise GrantRefused(401, "not_a_grant", "Not a storage grant of this platform.") from None


def check_live(grant: Grant) -> None:
    """409 once the placement is over (the job moved to another epoch, or ended); 403 for a node without
    chips of it."""
    job = Job.objects.filter(pk=grant.job_id).only("epoch", "status").first()
    if job is None or job.epoch != grant.epoch or job.status not in JobStatus.active():
        state = "gone" if job is None else f"at epoch {job.epoch}, {job.get_status_display().lower()}"
        raise GrantRefused(
            409, "grant_expired", f"The grant was for job {grant.job_id} epoch {grant.epoch}; the job is {state}."
        )
    if not Allocation.objects.filter(job_id=grant.job_id, epoch=grant.epoch, node_id=grant.node_id).exists():
        raise GrantRefused(403, "not_placed_here", f"Job {grant.job_id} epoch {grant.epoch} holds no chips there.")


def check_keys(grant: Grant, method: str, keys: list[str]) -> None:
    """400 for a malformed key, 403 naming every key the grant doesn't cover."""
    for key in keys:
        try:
            check_key(key)
        except StorageError as error:
            raise GrantRefused(400, "invalid_key", str(error), {"keys": [key]}) from None
    outside = [key for key in keys if not grant.allows(method, key)]
    if outside:
        where = "in this placement's inputs or checkpoints"
        if method != "GET":
            where = " or ".join(f"under {prefix}/" for prefix in (grant.checkpoints, *grant.writes))
        message = f"{method} is granted only {where}; refused: {', '.join(outside[:5])}"
        raise GrantRefused(403, "outside_grant", message, {"keys": outside})


def sign(token: str, method: str, keys: list[str], sizes: dict[str, int] | None = None) -> dict:
    """URLs for `keys` (GET or PUT); a PUT whose size is given may be a multipart upload instead."""
    grant = read_grant(token)
    check_live(grant)
    check_keys(grant, method, keys)
    store, ttl = platform_store(), settings.STORAGE_GRANT_URL_TTL_S
    sizes = sizes or {}
    try:
        uploads = {key: store.grant_upload(key, sizes[key], UPLOAD_TTL_S) for key in keys if _split(store, sizes, key)}
        urls = {key: store.grant_url(key, method, ttl) for key in keys if key not in uploads}
    except StorageError as error:
        raise GrantRefused(503, "storage_unavailable", f"Object storage can't sign right now: {error}") from None
    return {"urls": urls, "uploads": uploads, "expires_in": ttl}


def _split(store, sizes: dict[str, int], key: str) -> bool:
    return store.multipart and key in sizes


def finish_upload(token: str, method: str, key: str, upload_id: str, etags: list[str] | None = None) -> dict:
    """COMPLETE (the object exists from now) or ABORT a multipart upload the grant began."""
    grant = read_grant(token)
    check_live(grant)
    check_keys(grant, "PUT", [key])
    store = platform_store()
    try:
        if method == "COMPLETE":
            store.complete_upload(key, upload_id, etags or [])
        else:
            store.abort_upload(key, upload_id)
    except StorageError as error:
        raise GrantRefused(400, "upload_failed", f"{method.lower()} of {key}: {error}") from None
    return {"key": key}
