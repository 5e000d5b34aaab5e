"""User datasets: uploads validated line by line before anything is stored, kept in object storage
(a tree of one file, datasets/<owner id>/<uuid>/data.<txt|jsonl>), and previews of their first records
in a model's tokens with the loss mask (which tokens are trained on), read through the web's cache."""

from __future__ import annotations

import functools
import logging
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _

from base.uploads import UploadLimit
from fleet.choices import DatasetKind
from fleet.models import Dataset, UploadedModel
from kernel.chat_templates import Rendered, TemplateRefused, render_chats
from kernel.datasets.files import CHAT, first_records
from kernel.datasets.tokens import ByteTokenizer, Renderer, chat_prefixes, encode_record, load_tokenizer
from kernel.datasets.validation import DatasetError, validate_dataset_file
from kernel.storage import StorageError
from kernel.storage.trees import upload_tree
from workers.services.kernel_text import in_readers_language
from workers.services.redaction import redact
from workers.services.storage import StorageUnavailable, delete_stored_tree, platform_store, staged_tree
from workers.services.storage_quota import QuotaExceeded, check_room, recorded

logger = logging.getLogger(__name__)

BYTE_LEVEL = "byte"
BYTE_LEVEL_LABEL = "byte-level (catalog models)"
# Catalog models read bytes: the pieces and masks are the same whatever their vocabulary (all ≥ 256).
BYTE_LEVEL_VOCAB = 512
PREVIEW_RECORDS = 5
PREVIEW_TOKENS = 256
# Each string of a previewed record is cut to this many characters before tokenizing: far more than
# PREVIEW_TOKENS tokens of any tokenizer, so a huge line costs no more than a short one.
PREVIEW_CHARS = 16 * PREVIEW_TOKENS
# ...and each previewed chat to this many messages: far more than PREVIEW_TOKENS tokens once rendered, and
# its renders (two per assistant message) stay few.
PREVIEW_MESSAGES = 64
VISIBLE_WHITESPACE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥"})


class DatasetRejected(ValueError):
    """An upload that can't be trained on; the message says why."""


class DatasetTooLarge(DatasetRejected):
    """An upload over DATASET_MAX_BYTES (the API and the page answer 413)."""


def too_large(what: str, limit: int) -> DatasetTooLarge:
    """`what`: how large the upload is, in the request's language (base.uploads.upload_size)."""
    return DatasetTooLarge(
        _("%(what)s; a dataset may be at most %(limit)s bytes (%(mib)s MiB).")
        % {"what": what, "limit": f"{limit:,}", "mib": f"{limit / (1 << 20):.1f}"}
    )


class DatasetUploadLimit(UploadLimit):
    """Refuses a dataset upload over DATASET_MAX_BYTES while it streams in (put it first among a request's
    handlers): raises DatasetTooLarge out of the request's parsing."""

    def limit(self) -> int:
        return settings.DATASET_MAX_BYTES

    def refuse(self, what: str, limit: int) -> DatasetTooLarge:
        return too_large(what, limit)


class DatasetInUse(Exception):
    """A dataset a job trains or evaluates on; it can't be deleted."""


def stored_file_name(kind: str) -> str:
    """The stored file's name: its suffix makes the runtime read it as the kind the upload was checked as."""
    return "data.txt" if kind == DatasetKind.TEXT else "data.jsonl"


def store_dataset(owner, upload, *, name: str) -> Dataset:
    """Check the upload in full, then keep it in object storage and record it; raises DatasetRejected
    (or StorageUnavailable).

    Nothing is stored for a refused upload; the stored tree is deleted again if its row can't be written.
    """
    if upload.size > settings.DATASET_MAX_BYTES:
        raise too_large(_("The file is %(size)s bytes") % {"size": f"{upload.size:,}"}, settings.DATASET_MAX_BYTES)
    try:
        check_room(owner, upload.size, _("dataset"))
    except QuotaExceeded as error:
        raise DatasetRejected(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="dataset-") as scratch:
        checked = Path(scratch) / ("upload" + Path(upload.name).suffix.lower()[:16])  # the suffix says the kind
        with open(checked, "wb") as file:
            for chunk in upload.chunks():
                file.write(chunk)
        try:
            kind, samples = validate_dataset_file(checked, settings.DATASET_MAX_BYTES)
        except DatasetError as error:
            raise DatasetRejected(dataset_message(error)) from None
        tree = Path(scratch) / "tree"
        tree.mkdir()
        file_name = stored_file_name(kind)
        checked.rename(tree / file_name)
        prefix = f"datasets/{owner.pk}/{uuid.uuid4().hex}"
        try:
            manifest = upload_tree(platform_store(), prefix, tree, meta={"kind": kind})
        except StorageError as error:
            logger.error("storing dataset %s failed: %s", prefix, error)
            delete_stored_tree(prefix)
            raise StorageUnavailable(_("The dataset")) from None
    stored = manifest.files[file_name]
    fields = dict(kind=kind, store_prefix=prefix, file_name=file_name, sha256=stored.sha256, samples=samples)
    create = functools.partial(Dataset.objects.create, owner=owner, name=name[:120], size_bytes=stored.size, **fields)
    try:
        return recorded(owner, stored.size, _("dataset"), create)
    except QuotaExceeded as error:
        delete_stored_tree(prefix)
        raise DatasetRejected(str(error)) from None
    except BaseException:
        delete_stored_tree(prefix)
        raise


def delete_dataset(dataset: Dataset) -> None:
    """Delete the dataset and its stored tree; raises DatasetInUse while any job names it."""
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.jobs.exists() or locked.eval_jobs.exists():
            raise DatasetInUse(_("This dataset is used by a job and cannot be deleted."))
        try:
            locked.delete()
        except ProtectedError:  # a job that named it committed meanwhile
            raise DatasetInUse(_("This dataset is used by a job and cannot be deleted.")) from None
        prefix = locked.store_prefix
        transaction.on_commit(lambda: delete_stored_tree(prefix))


def dataset_message(error: DatasetError) -> str:
    """Why the dataset was refused, in the reader's language (workers.services.kernel_text)."""
    return in_readers_language(error)


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
        with staged_tree(dataset.store_prefix, select=lambda name: name == dataset.file_name) as folder:
            records = first_records(folder / dataset.file_name, dataset.kind, PREVIEW_RECORDS)
    except (OSError, DatasetError, StorageError) as error:
        raise DatasetRejected(_("Can't read the dataset's file: %(error)s") % {"error": redact(str(error))}) from None
    records = [_clip_record(record, dataset.kind) for record in records]
    renderers = _chat_renderers(tokenizer, records, dataset.kind)
    return [
        _preview_record(record, dataset.kind, tokenizer, render)
        for record, render in zip(records, renderers, strict=True)
    ]


def _chat_renderers(tokenizer, records: list[dict], kind: str) -> list[Renderer | None]:
    """For chats under a model's template: each record's renders, made at once in a bounded child process
    (kernel.chat_templates), never in this web thread. None: the tokenizer renders (no template, no chat)."""
    if kind != CHAT or not getattr(tokenizer, "chat_template", None):
        return [None] * len(records)
    chats = [(record["messages"], chat_prefixes(record["messages"])) for record in records]
    try:
        rendered = render_chats(tokenizer.get_chat_template(), tokenizer.special_tokens_map, chats)
    except (TemplateRefused, ValueError) as error:
        raise DatasetRejected(str(error)) from None
    return [functools.partial(_prerendered, renders) for renders in rendered]


def _prerendered(renders: Rendered, messages: list[dict], add_generation_prompt: bool) -> str:
    text = renders[(len(messages), add_generation_prompt)]
    if isinstance(text, TemplateRefused):
        raise DatasetError(str(text))
    return text


def _preview_record(record: dict, kind: str, tokenizer, render: Renderer | None) -> RecordPreview:
    try:
        ids, mask = encode_record(record, kind, tokenizer, render)
    except DatasetError as error:
        return RecordPreview(tokens=[], truncated=False, error=dataset_message(error))
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
        raise DatasetRejected(
            _("Unknown tokenizer '%(choice)s': choose byte-level or one of your models.") % {"choice": choice}
        )
    try:
        with staged_tree(model.store_prefix, select=is_tokenizer_file) as folder:
            try:
                return load_tokenizer(folder, int(model.config["vocab_size"]))
            except DatasetError as error:  # it names the folder: a temporary one here
                raise DatasetRejected(str(error).replace(f"'{folder}'", f"“{model.name}”")) from None
    except StorageError as error:
        raise DatasetRejected(
            _("Can't read the tokenizer of your model “%(name)s”: %(error)s")
            % {"name": model.name, "error": redact(str(error))}
        ) from None


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt")


def is_tokenizer_file(name: str) -> bool:
    """What loading a tokenizer may read: every file of a model folder but its weights."""
    return not name.lower().endswith(WEIGHT_SUFFIXES) and not name.endswith(".safetensors.index.json")


def _clip_record(record: dict, kind: str) -> dict:
    """A record as previewed: each string cut to PREVIEW_CHARS, a chat to its first PREVIEW_MESSAGES."""
    if kind == CHAT:
        record = {**record, "messages": record["messages"][:PREVIEW_MESSAGES]}
    return _clip(record)


def _clip(value):
    """A record with each string cut to PREVIEW_CHARS characters."""
    if isinstance(value, str):
        return value[:PREVIEW_CHARS]
    if isinstance(value, dict):
        return {key: _clip(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item) for item in value]
    return value
