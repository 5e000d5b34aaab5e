"""Uploaded datasets: validation and reading, without torch.

The platform calls `validate_dataset_file` when a user uploads a dataset, so this module must
import nothing heavy. The runtime calls `read_corpus` to get the bytes it tokenizes.

Two kinds of file are accepted, both UTF-8:
- "text": any text; every non-blank line counts as one record.
- "jsonl": one JSON object per non-blank line, each with a string "text" field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TEXT = "text"
JSONL = "jsonl"
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
TEXT_SUFFIXES = {".txt", ".text", ".md"}
DEFAULT_MAX_BYTES = 1 << 30


class DatasetError(ValueError):
    """A dataset the runtime cannot train on; the message says why in the user's terms."""


def validate_dataset_file(path: str | os.PathLike, max_bytes: int, kind: str | None = None) -> tuple[str, int]:
    """Check an uploaded file and return (kind, number of records).

    Raises DatasetError for a missing, empty, too large, binary or non-UTF-8 file, and for a
    malformed JSONL line (naming the line). `kind` forces "text" or "jsonl"; by default it
    comes from the file name, else from the first non-blank line.
    """
    text = _read_text(Path(path), max_bytes)
    kind = kind or guess_kind(path, text)
    if kind == JSONL:
        return JSONL, len(_jsonl_texts(text))
    if kind != TEXT:
        raise DatasetError(f"Unknown dataset kind '{kind}': use '{TEXT}' or '{JSONL}'.")
    return TEXT, sum(1 for line in text.splitlines() if line.strip())


def read_corpus(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The UTF-8 bytes the byte-level tokenizer trains on (JSONL records joined by newlines)."""
    path = local_path(str(path))
    text = _read_text(path, max_bytes)
    if guess_kind(path, text) == JSONL:
        text = "\n".join(_jsonl_texts(text))
    return text.encode("utf-8")


def local_path(dataset: str) -> Path:
    """A dataset reference as a local path; the runtime never downloads (the agent stages files)."""
    if dataset.startswith("file://"):
        return Path(dataset.removeprefix("file://"))
    if "://" in dataset:
        raise DatasetError(f"Dataset '{dataset}' is a URL; the runtime reads only local files.")
    return Path(dataset)


def guess_kind(path: str | os.PathLike, text: str) -> str:
    """JSONL for .jsonl/.ndjson names or a first line that opens an object, else text."""
    suffix = Path(path).suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return JSONL
    if suffix in TEXT_SUFFIXES:
        return TEXT
    first = next((line for line in text.splitlines() if line.strip()), "")
    return JSONL if first.lstrip().startswith("{") else TEXT


def _read_text(path: Path, max_bytes: int) -> str:
    """The file as text, after the checks that need no parsing."""
    if not path.is_file():
        raise DatasetError(f"Dataset file '{path}' does not exist.")
    size = path.stat().st_size
    if size > max_bytes:
        raise DatasetError(f"Dataset is too large: {_mib(size)} MiB; the limit is {_mib(max_bytes)} MiB.")
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError("Dataset is empty.")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise DatasetError(f"Dataset looks binary: it contains a NUL byte at offset {nul}.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"Dataset is not UTF-8 text: invalid byte at offset {exc.start}.") from None


def _jsonl_texts(text: str) -> list[str]:
    """The "text" field of every record; the first malformed line raises, naming its number."""
    texts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"Line {number} is not valid JSON: {exc.msg} (column {exc.colno}).") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DatasetError(f'Line {number} must be a JSON object with a string "text" field.')
        texts.append(record["text"])
    if not any(t.strip() for t in texts):
        raise DatasetError('Dataset has no text: every record\'s "text" is empty.')
    return texts


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"
