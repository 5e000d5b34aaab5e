"""Uploaded datasets: validation and reading, without torch.

The platform calls `validate_dataset_file` when a user uploads a dataset, so this module must
import nothing heavy. Parsing and the record kinds (text, jsonl, chat, completion) live in
workers.runtime.records; this module adds the upload's entry point and dataset references.
"""

from __future__ import annotations

import os
from pathlib import Path

from workers.runtime.records import DEFAULT_MAX_BYTES, JSONL, TEXT, DatasetError, read_records, read_text

__all__ = ["DatasetError", "local_path", "read_corpus", "validate_dataset_file"]


def validate_dataset_file(path: str | os.PathLike, max_bytes: int, kind: str | None = None) -> tuple[str, list[dict]]:
    """Check an uploaded file and return (kind, records).

    Raises DatasetError for a missing, empty, too large, binary or non-UTF-8 file, and for the first
    malformed line (naming its number). `kind` forces one of the record kinds; by default it comes
    from the file name, else from the first record.
    """
    return read_records(path, kind, max_bytes)


def read_corpus(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The UTF-8 bytes a byte-level model trains on: a text file whole, JSONL records joined by newlines."""
    path = local_path(str(path))
    kind, records = read_records(path, max_bytes=max_bytes)
    if kind == TEXT:
        return read_text(path, max_bytes).encode("utf-8")
    if kind != JSONL:
        raise DatasetError(f"A {kind} dataset is read as records (workers.runtime.records), not as one text.")
    return "\n".join(record["text"] for record in records).encode("utf-8")


def local_path(dataset: str) -> Path:
    """A dataset reference as a local path; the runtime never downloads (the agent stages files)."""
    if dataset.startswith("file://"):
        return Path(dataset.removeprefix("file://"))
    if "://" in dataset:
        raise DatasetError(f"Dataset '{dataset}' is a URL; the runtime reads only local files.")
    return Path(dataset)
