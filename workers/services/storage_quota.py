"""Each user's storage quota: what their datasets and models may hold together (STORAGE_QUOTA_BYTES).

Counted from the rows' recorded sizes: the bytes `storage_usage` finds in object storage under the user's
datasets and models, less their few-hundred-byte manifests, with no listing of the store per upload. The
checkpoints of the user's jobs are shown beside it but not counted: the platform writes them while it
trains, and an upload must not fail because a job saved its state.

An upload is refused early when its own size would pass the quota, and checked again when its row is
written, under a per-user lock, so two uploads at once can't both slip under it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _

from fleet.models import Dataset, UploadedModel
from workers.models import JobCheckpoint

T = TypeVar("T")
QUOTA_LOCK = zlib.crc32(b"starverse-storage-quota") & 0x7FFFFFFF  # advisory lock keys are 32-bit signed


class QuotaExceeded(ValueError):
    """An upload that would pass its owner's storage quota; the message names the quota and what is used."""

    code = "storage_quota_exceeded"


@dataclass(frozen=True)
class StorageUse:
    """A user's bytes in object storage: what counts against the quota, and their jobs' checkpoints."""

    datasets: int
    models: int
    checkpoints: int
    quota: int

    @property
    def used(self) -> int:
        return self.datasets + self.models

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.quota)) if self.quota else 100


def storage_use(owner) -> StorageUse:
    return StorageUse(
        datasets=_total(Dataset.objects.filter(owner=owner), "size_bytes"),
        models=_total(UploadedModel.objects.filter(owner=owner), "size_bytes"),
        checkpoints=_total(JobCheckpoint.objects.filter(job__owner=owner), "bytes"),
        quota=settings.STORAGE_QUOTA_BYTES,
    )


def _total(rows, field: str) -> int:
    return rows.aggregate(total=Sum(field))["total"] or 0


def check_room(owner, adding: int, what: str) -> None:
    """Raise QuotaExceeded if `adding` more bytes would pass the owner's quota. `what`: the upload's kind in the
    request's language ("dataset", "model")."""
    use = storage_use(owner)
    if use.used + adding > use.quota:
        raise QuotaExceeded(
            _(
                "This %(what)s takes %(adding)s, but your storage quota is %(quota)s and your datasets and models "
                "already use %(used)s (datasets %(datasets)s, models %(models)s). Delete ones you no longer need, "
                "or ask the operator for a larger quota."
            )
            % {
                "what": what,
                "adding": size(adding),
                "quota": size(use.quota),
                "used": size(use.used),
                "datasets": size(use.datasets),
                "models": size(use.models),
            }
        )


def recorded(owner, adding: int, what: str, create: Callable[[], T]) -> T:
    """The row `create()` writes for an upload of `adding` bytes, once the quota has room for it.

    The check and the row are one transaction under a per-owner lock: two uploads finishing at once would
    otherwise each see the room before the other's row, and pass the quota together."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [QUOTA_LOCK, owner.pk])
        check_room(owner, adding, what)
        return create()


def size(count: int) -> str:
    return filesizeformat(count).replace("\xa0", " ")
