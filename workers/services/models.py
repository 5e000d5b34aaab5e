"""Users' own Hugging Face models: storing an upload, deleting one, and resolving the model a job names.

An upload is checked in full (kernel.modelfiles.checks) in a private scratch folder before anything is kept;
only a valid model folder is stored, as the tree models/<owner id>/<uuid> in object storage
(kernel/storage), and recorded as an UploadedModel. A job names its model as a catalog name
("llama-tiny"), an upload ("model:7") or a Hugging Face Hub id ("org/name") that this platform's Hugging
Face cache already holds: `resolve_model_source` turns any of them into what planning and the runtime
need, and nothing is ever downloaded from the Hub. A Hub snapshot is uploaded once, before the first
launch that trains it, to hub/<org>--<name>/<commit> (`store_hub_snapshot`); launches name a model's tree
as store:<prefix>.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from base.uploads import UploadLimit, upload_size
from fleet.choices import JobStatus
from fleet.models import Job, UploadedModel
from kernel.modelfiles import hfconfig
from kernel.modelfiles.archives import Limits, extract_archive
from kernel.modelfiles.checks import check_model_dir
from kernel.modelfiles.errors import ModelFileError, ModelTooLarge
from kernel.modelfiles.hfconfig import ModelShape
from kernel.modelfiles.loaders import refuse_unneeded_files
from kernel.modelspecs import CATALOG
from kernel.storage import StorageError
from kernel.storage.trees import read_manifest, upload_files, upload_tree, write_manifest
from workers.services.job_models import job_output_source
from workers.services.kernel_text import in_readers_language
from workers.services.model_limits import check_fleet_can_train
from workers.services.model_sources import ModelSource, ModelUnavailable, default_seq_len
from workers.services.storage import StorageUnavailable, delete_stored_tree, platform_store
from workers.services.storage_quota import QuotaExceeded, check_room, recorded

logger = logging.getLogger(__name__)

MODELS_PREFIX, HUB_PREFIX = "models", "hub"
MODEL_REFERENCE = re.compile(r"^model:([0-9]{1,18})$")
JOB_REFERENCE = re.compile(r"^job:([0-9]{1,18})$")  # a finished job's exported model (`job_output_source`)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
ARCHIVE_SUFFIX = re.compile(r"(\.tar\.gz|\.tgz|\.tar|\.zip)$", re.IGNORECASE)


class ModelInUse(Exception):
    """A model an unfinished job trains; it can't be deleted before the job ends."""

    def __init__(self, model: UploadedModel, job: Job):
        super().__init__(
            gettext(
                "Model %(model)s is used by job %(id)s (%(status)s); cancel the job or wait for it to end, "
                "then delete the model."
            )
            % {"model": model.reference, "id": job.pk, "status": job.get_status_display().lower()}
        )
        self.job = job


def too_large(what: str, limit: int) -> ModelTooLarge:
    """kernel.modelfiles.errors.too_large in the request's language: `what` says how large the upload is."""
    message = gettext(
        "%(what)s; the limit is %(limit)s bytes. Upload the model in safetensors without extra files."
    ) % {
        "what": what,
        "limit": f"{limit:,}",
    }
    return ModelTooLarge(message, code="model_too_large")


def upload_limits() -> Limits:
    return Limits(
        max_archive_bytes=settings.MODEL_MAX_BYTES,
        max_extracted_bytes=settings.MODEL_MAX_BYTES,
        max_members=settings.MODEL_MAX_FILES,
    )


class ModelUploadLimit(UploadLimit):
    """Refuses a model upload over MODEL_MAX_BYTES while it streams in (put it first among a request's handlers):
    raises ModelTooLarge out of the request's parsing."""

    def limit(self) -> int:
        return settings.MODEL_MAX_BYTES

    def refuse(self, what: str, limit: int) -> ModelTooLarge:
        return too_large(what, limit)


def store_model(owner, upload, name: str = "") -> UploadedModel:
    """Check an uploaded archive in full and keep it as the owner's model; raises ModelFileError, or
    StorageUnavailable when object storage fails.

    Nothing is left behind on a refusal or a failure: the scratch folder goes, and the stored tree too
    if its row can't be written.
    """
    limits = upload_limits()
    if upload.size is not None and upload.size > limits.max_archive_bytes:
        raise too_large(upload_size(upload.size), limits.max_archive_bytes)
    within_quota(owner, upload.size or 0)
    staging = Path(tempfile.mkdtemp(dir=settings.FILE_UPLOAD_TEMP_DIR, prefix="model-upload-"))  # 0700
    try:
        archive = archive_on_disk(upload, staging, limits.max_archive_bytes)
        unpacked = staging / "unpacked"
        unpacked.mkdir(mode=0o700)
        try:
            folder = extract_archive(archive, unpacked, limits)
            checked = check_model_dir(folder, admit=check_fleet_can_train)
            refuse_unneeded_files(folder, checked)
        except ModelFileError as error:  # the same refusal (a ModelTooLarge stays one), in the reader's language
            raise type(error)(model_file_message(error), error.code) from None
        within_quota(owner, checked.size_bytes)
        prefix = f"{MODELS_PREFIX}/{owner.pk}/{uuid.uuid4().hex}"
        try:
            upload_tree(platform_store(), prefix, folder, meta={"architecture": checked.architecture})
        except StorageError as error:
            logger.error("storing model %s failed: %s", prefix, error)
            delete_stored_tree(prefix)
            raise StorageUnavailable(gettext("The model")) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    create = functools.partial(
        UploadedModel.objects.create,
        owner=owner,
        name=(name.strip() or default_name(upload.name))[:120],
        architecture=checked.architecture,
        parameters=checked.parameters,
        size_bytes=checked.size_bytes,
        config=checked.config,
        shape=checked.shape,
        has_chat_template=checked.has_chat_template,
        store_prefix=prefix,
    )
    try:
        return recorded(owner, checked.size_bytes, gettext("model"), create)
    except QuotaExceeded as error:
        delete_stored_tree(prefix)
        raise ModelFileError(str(error), code=QuotaExceeded.code) from None
    except BaseException:
        delete_stored_tree(prefix)
        raise


def model_file_message(error: ModelFileError) -> str:
    """Why the model files were refused, in the reader's language (workers.services.kernel_text)."""
    return in_readers_language(error)


def within_quota(owner, adding: int) -> None:
    """Refuse an upload whose bytes alone would pass the owner's storage quota, before they are stored."""
    try:
        check_room(owner, adding, gettext("model"))
    except QuotaExceeded as error:
        raise ModelFileError(str(error), code=QuotaExceeded.code) from None


def archive_on_disk(upload, staging: Path, limit: int) -> Path:
    """The upload as a file: the temporary file Django streamed it to, or a copy of it made chunk by chunk."""
    if hasattr(upload, "temporary_file_path"):
        return Path(upload.temporary_file_path())
    copy = staging / "upload"
    written = 0
    with open(copy, "xb") as file:
        for chunk in upload.chunks():
            written += len(chunk)
            if written > limit:
                raise too_large(upload_size(None), limit)
            file.write(chunk)
    return copy


def default_name(file_name: str | None) -> str:
    return ARCHIVE_SUFFIX.sub("", Path(file_name or "").name) or "model"


def delete_model(owner, model: UploadedModel) -> None:
    """Delete one of the owner's models and its stored tree; raises ModelInUse while an unfinished job trains it."""
    with transaction.atomic():
        locked = UploadedModel.objects.select_for_update().get(pk=model.pk, owner=owner)
        job = jobs_training(locked).first()
        if job is not None:
            raise ModelInUse(locked, job)
        prefix = locked.store_prefix
        locked.delete()
        transaction.on_commit(lambda: delete_stored_tree(prefix))


def lock_for_launch(name: str) -> None:
    """Inside a launch's transaction: lock the uploaded model a job names, so a delete can't slip between
    the job's checks and its row (delete_model takes the same lock). Raises ModelUnavailable if it is gone."""
    reference = MODEL_REFERENCE.match(name)
    if reference and not UploadedModel.objects.select_for_update().filter(pk=int(reference[1])).exists():
        raise ModelUnavailable(gettext("Model '%(name)s' was deleted; upload it again to train it.") % {"name": name})


def jobs_training(model: UploadedModel):
    """The unfinished jobs that name the model, oldest first."""
    return Job.objects.filter(model_name=model.reference).exclude(status__in=JobStatus.finished()).order_by("id")


# -- resolving the model a job names ---------------------------------------------------------------


def resolve_model_source(name: str, owner=None) -> ModelSource:
    """The model a job names: a catalog name, 'model:<id>' (the owner's, when an owner is given) or a Hub id
    in this platform's Hugging Face cache. Raises ModelUnavailable saying what would do."""
    name = name.strip()
    if name in CATALOG:
        return catalog_source(name)
    if reference := MODEL_REFERENCE.match(name):
        return upload_source(int(reference[1]), owner)
    if reference := JOB_REFERENCE.match(name):
        return job_output_source(int(reference[1]), owner)
    if HUB_ID.match(name) and ".." not in name and "--" not in name:
        return hub_source(name)
    raise ModelUnavailable(
        gettext(
            "Unknown model '%(name)s'. Use a built-in model (%(catalog)s), one of your uploads (model:<id>), a "
            "finished job's trained model (job:<id>), or a Hugging Face Hub id (org/name) that this platform's "
            "Hugging Face cache holds."
        )
        % {"name": name, "catalog": ", ".join(CATALOG)}
    )


def catalog_source(name: str) -> ModelSource:
    model = CATALOG[name]
    return ModelSource(
        name=model.name,
        reference=model.name,
        config=dict(model.config),
        store_prefix=None,
        shape=hfconfig.model_shape(model.config),
        seq_len=model.seq_len,
        source="catalog",
        description=model.description,
    )


def upload_source(pk: int, owner=None) -> ModelSource:
    models = UploadedModel.objects.filter(pk=pk)
    if owner is not None:
        models = models.filter(owner=owner)
    model = models.first()
    if model is None:
        if owner is None:
            raise ModelUnavailable(gettext("There is no model model:%(id)s.") % {"id": pk})
        raise ModelUnavailable(
            gettext("There is no model model:%(id)s among yours; see yours with GET /api/v1/models/.") % {"id": pk}
        )
    return ModelSource(
        name=model.name,
        reference=model.reference,
        config=model.config,
        store_prefix=model.store_prefix,
        shape=ModelShape.from_dict(model.shape),
        seq_len=default_seq_len(model.config),
        source="upload",
        description=f"Your {model.architecture} model “{model.name}”, {model.parameters:,} parameters",
        has_chat_template=model.has_chat_template,
    )


def hub_source(repo_id: str) -> ModelSource:
    folder = hub_snapshot(repo_id)
    if folder is None:
        raise ModelUnavailable(
            gettext(
                "Model '%(name)s' is a Hugging Face Hub id and isn't in this platform's Hugging Face cache; nothing "
                "is downloaded from the Hub. Upload the model folder (`starverse model upload DIR`, POST "
                "/api/v1/models/ or the Models page) and use its reference (model:<id>)."
            )
            % {"name": repo_id}
        )
    try:
        checked = checked_snapshot(folder)
    except ModelFileError as error:
        unusable = gettext("Model '%(name)s' in this platform's Hugging Face cache can't be trained: %(error)s") % {
            "name": repo_id,
            "error": model_file_message(error),
        }
        raise ModelUnavailable(unusable) from None
    return ModelSource(
        name=repo_id,
        reference=repo_id,
        config=checked.config,
        store_prefix=hub_prefix(repo_id, folder),
        shape=ModelShape.from_dict(checked.shape),
        seq_len=default_seq_len(checked.config),
        source="hub",
        description=f"{repo_id} from this platform's Hugging Face cache, {checked.parameters:,} parameters",
        has_chat_template=checked.has_chat_template,
        snapshot=folder,
    )


def hub_prefix(repo_id: str, snapshot: Path) -> str:
    """hub/<org>--<name>/<commit>: a snapshot folder is named by its commit and never changes."""
    return f"{HUB_PREFIX}/{repo_id.replace('/', '--')}/{snapshot.name}"


_stored_snapshots: set[tuple[str, str]] = set()  # (store URL, prefix): known to be stored


def store_hub_snapshot(source: ModelSource) -> None:
    """Upload a Hub model's cached snapshot to its tree unless it is stored already (checked once per process:
    a snapshot never changes). Called before the first placement of a job that trains it; raises StorageError
    when storage fails."""
    if source.source != "hub" or source.snapshot is None or source.store_prefix is None:
        return
    store = platform_store()
    if (store.url, source.store_prefix) in _stored_snapshots:
        return
    if read_manifest(store, source.store_prefix) is None:
        names = snapshot_files(source.snapshot)
        entries = upload_files(store, source.store_prefix, source.snapshot, names)
        write_manifest(store, source.store_prefix, entries, meta={"hub_id": source.reference})
        logger.info("stored %s's snapshot as %s (%d files)", source.reference, source.store_prefix, len(names))
    _stored_snapshots.add((store.url, source.store_prefix))


def snapshot_files(folder: Path) -> list[str]:
    """A snapshot's files as '/'-paths: huggingface_hub links each to its blob, so links to files count."""
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


@functools.lru_cache(maxsize=32)
def checked_snapshot(folder: Path):
    """The full check of a cached snapshot, once per process: a snapshot folder is named by its commit and
    never changes, and every quote, launch and placement of a Hub id resolves it again."""
    return check_model_dir(folder)


def hub_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot of the repository's main revision, or None; the network is never used."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, IncompleteSnapshotError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, local_files_only=True, cache_dir=hub_cache_folder())
    except (LocalEntryNotFoundError, IncompleteSnapshotError, HFValidationError):
        return None
    return Path(folder)


def hub_cache_folder() -> Path:
    """The Hugging Face cache the environment names now (huggingface_hub reads HF_HOME once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    home = os.environ.get("HF_HOME") or os.path.join(cache_home, "huggingface")
    return Path(home).expanduser() / "hub"


__all__ = [
    "ModelFileError",
    "ModelInUse",
    "ModelSource",
    "ModelTooLarge",
    "ModelUnavailable",
    "ModelUploadLimit",
    "delete_model",
    "model_file_message",
    "resolve_model_source",
    "store_model",
]
