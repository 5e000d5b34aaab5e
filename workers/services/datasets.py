"""User datasets: uploads validated line by line before anything is stored, and previews of their
first records in a model's tokens with the loss mask (which tokens are trained on)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.db import transaction

from workers.models import Dataset, UploadedModel
from workers.runtime.datasets import DatasetError, validate_dataset_file
from workers.runtime.records import ByteTokenizer, encode_record, first_records, load_tokenizer

BYTE_LEVEL = "byte"
BYTE_LEVEL_LABEL = "byte-level (catalog models)"
# Catalog models read bytes: the pieces and masks are the same whatever their vocabulary (all ≥ 256).
BYTE_LEVEL_VOCAB = 512
PREVIEW_RECORDS = 5
PREVIEW_TOKENS = 256
# Each string of a previewed record is cut to this many characters before tokenizing: far more than
# PREVIEW_TOKENS tokens of any tokenizer, so a huge line costs no more than a short one.
PREVIEW_CHARS = 16 * PREVIEW_TOKENS
VISIBLE_WHITESPACE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥"})


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
            kind, records = validate_dataset_file(scratch.name, settings.DATASET_MAX_BYTES)
        except DatasetError as error:
            raise DatasetRejected(str(error)) from None
        with transaction.atomic():
            dataset = Dataset(owner=owner, name=name[:120], kind=kind, size_bytes=upload.size, samples=len(records))
            scratch.seek(0)
            dataset.file.save(Path(upload.name).name, File(scratch), save=False)
            dataset.save()
    return dataset


# Previews


@dataclass(frozen=True)
class PreviewToken:
    text: str  # the token's text, whitespace made visible
    trained: bool  # in the loss mask: the model learns to predict it


@dataclass(frozen=True)
class RecordPreview:
    tokens: list[PreviewToken]
    truncated: bool  # the record has more than PREVIEW_TOKENS tokens
    error: str = ""  # why this record can't be encoded with this tokenizer


def preview_tokenizers(owner) -> list[tuple[str, str]]:
    """(value, label) of the tokenizers a dataset can be previewed with: byte-level, and the owner's models."""
    models = UploadedModel.objects.filter(owner=owner)
    return [(BYTE_LEVEL, BYTE_LEVEL_LABEL)] + [(model.reference, model.name) for model in models]


def preview_dataset(dataset: Dataset, tokenizer_choice: str) -> list[RecordPreview]:
    """The dataset's first records in the chosen tokenizer's tokens, each cut to PREVIEW_TOKENS.

    Raises DatasetRejected for a tokenizer that isn't one of the owner's choices or won't load, or a
    stored file that can't be read.
    """
    tokenizer = _preview_tokenizer(dataset.owner, tokenizer_choice)
    try:
        records = first_records(dataset.file.path, dataset.kind, PREVIEW_RECORDS)
    except (OSError, DatasetError) as error:
        raise DatasetRejected(f"Can't read the dataset's file: {error}") from None
    return [_preview_record(_clip(record), dataset.kind, tokenizer) for record in records]


def _preview_record(record: dict, kind: str, tokenizer) -> RecordPreview:
    try:
        ids, mask = encode_record(record, kind, tokenizer)
    except DatasetError as error:
        return RecordPreview(tokens=[], truncated=False, error=str(error))
    tokens = [
        PreviewToken(tokenizer.decode([token]).translate(VISIBLE_WHITESPACE), trained)
        for token, trained in zip(ids[:PREVIEW_TOKENS], mask[:PREVIEW_TOKENS], strict=True)
    ]
    return RecordPreview(tokens=tokens, truncated=len(ids) > PREVIEW_TOKENS)


def _preview_tokenizer(owner, choice: str):
    if choice == BYTE_LEVEL:
        return ByteTokenizer(BYTE_LEVEL_VOCAB)
    model = next((model for model in UploadedModel.objects.filter(owner=owner) if model.reference == choice), None)
    if model is None:
        raise DatasetRejected(f"Unknown tokenizer '{choice}': choose byte-level or one of your models.")
    try:
        return load_tokenizer(model.path, int(model.config["vocab_size"]))
    except DatasetError as error:
        raise DatasetRejected(str(error)) from None


def _clip(value):
    """A record with each string cut to PREVIEW_CHARS characters."""
    if isinstance(value, str):
        return value[:PREVIEW_CHARS]
    if isinstance(value, dict):
        return {key: _clip(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item) for item in value]
    return value
