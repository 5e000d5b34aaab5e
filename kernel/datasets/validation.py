"""Uploaded datasets: validation and reading, without torch.

The platform calls `validate_dataset_file` when a user uploads a dataset, so this module must
import nothing heavy. Parsing and the record kinds (text, jsonl, chat, completion) live in
kernel.datasets.files; this module adds the upload's entry point and dataset references.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel.datasets.files import DatasetError, count_records

__all__ = ["DatasetError", "local_path", "validate_dataset_file"]


def validate_dataset_file(path: str | os.PathLike, max_bytes: int, kind: str | None = None) -> tuple[str, int]:
    """Check an uploaded file line by line, one record in memory at a time; return (kind, number of records).

    Raises DatasetError for a missing, empty, too large, binary or non-UTF-8 file, and for the first
    malformed line (naming its number). `kind` forces one of the record kinds; by default it comes
    from the file name, else from the first record.
    """
    return count_records(path, kind, max_bytes)


def local_path(dataset: str) -> Path:
    """A dataset reference as a local path; the runtime never downloads (the agent stages files)."""
    if dataset.startswith("file://"):
        return Path(dataset.removeprefix("file://"))
    if "://" in dataset:
        raise DatasetError(f"Dataset '{dataset}' is a URL; the runtime reads only local files.")
    return Path(dataset)
