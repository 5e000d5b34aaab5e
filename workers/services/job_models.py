"""A finished job's trained model as the model of a new job: `job:<id>` (issue #31).

The runtime exports each checkpoint's weights in Hugging Face format into its tree (hosts/runtime/export.py):
`model/` holds a full fine-tune's weights, and a LoRA job's merged weights in its final and stop checkpoints.
`job:<id>` names the `model/` folder of that job's latest checkpoint, the one its model download serves
(workers/services/model_download.py): the owner's own job, ended, whose latest checkpoint holds a `model/`.
A new job trains those weights as it would an upload's, in full or with a new LoRA adapter. To keep training
the same adapter (or the same optimizer state), continue the job instead (workers/services/continuation.py).

The launch names the checkpoint's tree (`store:checkpoints/job-<id>/step-<n>`) and the folder inside it; the
rank stages only that folder (hosts/runtime/staging.py) and its grant reads that tree alone.
"""

from __future__ import annotations

import json

from django.utils.translation import gettext as _

from fleet.choices import JobStatus
from fleet.models import Job
from kernel.modelfiles import hfconfig
from kernel.storage import StorageError
from kernel.storage.locations import is_stored, key_of
from kernel.storage.trees import read_manifest
from workers.services.checkpoints import is_own_checkpoint
from workers.services.model_sources import ModelSource, ModelUnavailable, default_seq_len
from workers.services.storage import platform_store

MODEL_DIR = "model"
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def job_output_source(pk: int, owner=None) -> ModelSource:
    """`job:<pk>`: the exported model of the job (the owner's, when an owner is given); ModelUnavailable says
    why it can't be trained."""
    jobs = Job.objects.filter(pk=pk)
    if owner is not None:
        jobs = jobs.filter(owner=owner)
    job = jobs.first()
    if job is None:
        raise ModelUnavailable(
            _("There is no job job:%(id)s among yours; see yours with GET /api/v1/jobs/.") % {"id": pk}
        )
    if job.status not in JobStatus.finished():
        raise ModelUnavailable(
            _(
                "Job %(id)s is %(status)s: its model can be trained on once it has ended (or continue it when it "
                "has: POST /api/v1/jobs/%(id)s/continue/)."
            )
            % {"id": pk, "status": job.get_status_display().lower()}
        )
    key = key_of(job.latest_checkpoint) if is_stored(job.latest_checkpoint) else None
    if key is None or not is_own_checkpoint(job.pk, key):
        raise ModelUnavailable(_("Job %(id)s saved no checkpoint, so it has no trained model.") % {"id": pk})
    try:
        files, config = exported_model(key)
    except StorageError as error:
        raise ModelUnavailable(
            _("Job %(id)s's model can't be read from storage now (%(error)s); try again.") % {"id": pk, "error": error}
        ) from None
    if config is None:
        raise ModelUnavailable(
            _(
                "Job %(id)s's last checkpoint holds no exported model (%(folder)s/): a LoRA job's merged model is "
                "written at its end or stop. Continue job %(id)s to go on training its adapter."
            )
            % {"id": pk, "folder": MODEL_DIR}
        )
    spec = job.model_spec or {}
    return ModelSource(
        name=job.name or f"job {pk}",
        reference=f"job:{pk}",
        config=config,
        store_prefix=key,
        store_folder=MODEL_DIR,
        shape=hfconfig.model_shape(config),
        seq_len=int(job.seq_len or spec.get("seq_len") or default_seq_len(config)),
        source="job",
        description=f"Job {pk}'s trained model ({job.model_name}, {job.step} steps)",
        has_chat_template=any(f"{MODEL_DIR}/{name}" in files for name in CHAT_TEMPLATE_FILES),
    )


_exported: dict[tuple[str, str], tuple[frozenset[str], dict]] = {}  # (store URL, tree): a stored tree never changes


def exported_model(key: str) -> tuple[frozenset[str], dict | None]:
    """(the tree's file names, model/config.json) of a checkpoint tree; config None when it exported no model.
    Every quote, launch and placement reads a tree that has one once per process."""
    store = platform_store()
    if (store.url, key) in _exported:
        return _exported[store.url, key]
    manifest = read_manifest(store, key)
    if manifest is None or f"{MODEL_DIR}/config.json" not in manifest.files:
        return frozenset(manifest.files if manifest else ()), None
    with store.open(f"{key}/{MODEL_DIR}/config.json") as handle:
        config = json.loads(handle.read())
    _exported[store.url, key] = (frozenset(manifest.files), config)
    return _exported[store.url, key]
