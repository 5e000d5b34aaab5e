"""User dataset uploads: validated (size, encoding, non-empty, JSONL shape) before anything is stored."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.db import transaction

from workers.models import Dataset
from workers.runtime.datasets import DatasetError, validate_dataset_file


class DatasetRejected(ValueError):
    """An upload that can't be trained on; the message says why."""


def store_dataset(owner, upload, *, name: str) -> Dataset:
    if upload.size > settings.DATASET_MAX_BYTES:
        raise DatasetRejected(f"The file is {upload.size:,} bytes; the limit is {settings.DATASET_MAX_BYTES:,} bytes.")
    suffix = Path(upload.name).suffix.lower()
    with tempfile.NamedTemporaryFile(suffix=suffix) as scratch:
        for chunk in upload.chunks():
            scratch.write(chunk)
        scratch.flush()
        try:
            kind, samples = validate_dataset_file(scratch.name, settings.DATASET_MAX_BYTES)
        except DatasetError as error:
            raise DatasetRejected(str(error)) from None
        with transaction.atomic():
            dataset = Dataset(owner=owner, name=name[:120], kind=kind, size_bytes=upload.size, samples=samples)
            scratch.seek(0)
            dataset.file.save(Path(upload.name).name, File(scratch), save=False)
            dataset.save()
    return dataset
