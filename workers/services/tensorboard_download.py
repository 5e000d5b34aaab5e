"""A job's TensorBoard event files as one download (docs/FINE_TUNING.md, "Tracking").

The rank that logs the run stores them as trees beside its checkpoints, one per placement:
`checkpoints/job-<id>/tensorboard/epoch-<n>/` (hosts/runtime/tracking.py), each re-uploaded at every
checkpoint and at the end, its manifest written last. The download is a tar of every complete tree,
unpacking to `job-<id>-tensorboard/epoch-<n>/`: `tensorboard --logdir job-<id>-tensorboard` shows each
placement as a run. Streamed like the model's (workers/services/model_download.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.utils.translation import gettext as _

from fleet.models import Job
from kernel.storage import Store
from kernel.storage.trees import MANIFEST, FileEntry, read_manifest
from workers.services.model_download import tar_stream
from workers.services.placement import checkpoint_prefix
from workers.services.storage import platform_store

TENSORBOARD = "tensorboard"  # the folder beside the checkpoints (hosts/runtime/tracking.py's)


class TensorBoardNotReady(Exception):
    """No event files are stored for the job (yet)."""


@dataclass(frozen=True)
class TensorBoardDownload:
    filename: str
    store: Store
    prefix: str  # checkpoints/job-<id>/tensorboard
    files: dict[str, FileEntry]  # epoch-<n>/events.out.tfevents...

    def stream(self) -> Iterator[bytes]:
        return tar_stream(self.store, self.prefix, self.files, self.filename.removesuffix(".tar"), {})


def tensorboard_download(job: Job) -> TensorBoardDownload:
    """What `GET /jobs/{id}/tensorboard/` sends; raises TensorBoardNotReady or StorageError."""
    store = platform_store()
    prefix = f"{checkpoint_prefix(job)}/{TENSORBOARD}"
    suffix = "/" + MANIFEST
    trees = sorted(item.key[len(prefix) + 1 : -len(suffix)] for item in store.list(prefix) if item.key.endswith(suffix))
    files = {}
    for tree in trees:
        if "/" in tree:
            continue  # a tree is one folder deep: epoch-<n>
        manifest = read_manifest(store, f"{prefix}/{tree}")
        files.update({f"{tree}/{name}": entry for name, entry in (manifest.files if manifest else {}).items()})
    if not files:
        raise TensorBoardNotReady(
            _(
                "Job %(job)s has no TensorBoard files yet (%(status)s): they are stored at its checkpoints and at the "
                "end."
            )
            % {"job": job.pk, "status": job.status}
        )
    return TensorBoardDownload(f"job-{job.pk}-tensorboard.tar", store, prefix, files)
