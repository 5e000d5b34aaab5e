"""A job asked in epochs: its steps, from the dataset's tokens and the planned global batch.

The dataset's tokens are counted in the model's own tokenizer (bytes for the catalog's models) over
its first SAMPLE_RECORDS records, exact for a dataset that small and scaled to its record count
otherwise; a held-out eval fraction is left out. The launch plans the job once to learn its global
batch, works the steps out, and pins that batch (re-plans keep it), so the steps stay the epochs asked.
"""

from __future__ import annotations

from dataclasses import replace

from django.utils.translation import gettext

from fleet.models import Dataset
from kernel import planner
from kernel.datasets.files import first_records
from kernel.datasets.tokens import encode_record, load_tokenizer
from kernel.datasets.validation import DatasetError
from kernel.hyperparameters import steps_for_epochs
from kernel.spec import JobSpec
from kernel.storage import StorageError
from workers.services.datasets import is_tokenizer_file
from workers.services.models import ModelSource, resolve_model_source
from workers.services.redaction import redact
from workers.services.storage import staged_tree

SAMPLE_RECORDS = 256
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class EpochsRefused(ValueError):
    """Why a job can't be counted in epochs (the API's 400 on `n_epochs`)."""


def with_epochs(spec: JobSpec, plan_of) -> tuple[JobSpec, planner.Plan]:
    """(the spec with max_steps from its epochs and its global batch pinned, its plan); `plan_of(spec)` plans.

    A spec without epochs comes back as it is, with its plan.
    """
    if not spec.n_epochs:
        return spec, plan_of(spec)
    first = plan_of(replace(spec, max_steps=1))  # only its global batch is read
    tokens = dataset_tokens(spec)
    steps = steps_for_epochs(spec.n_epochs, tokens, first.tokens_per_step // first.global_batch, first.global_batch)
    counted = replace(spec, max_steps=steps, global_batch=first.global_batch)
    return counted, plan_of(counted)


def dataset_tokens(spec: JobSpec) -> int:
    """The training tokens of the spec's dataset in its model's tokens (estimated past SAMPLE_RECORDS records)."""
    if spec.dataset_upload_id is None:
        raise EpochsRefused(
            gettext("The synthetic dataset never ends: give max_steps, or train on a dataset of yours.")
        )
    dataset = Dataset.objects.get(pk=spec.dataset_upload_id)
    source = resolve_model_source(spec.model_name)
    try:
        with staged_tree(dataset.store_prefix, select=lambda name: name == dataset.file_name) as folder:
            records = first_records(folder / dataset.file_name, dataset.kind, SAMPLE_RECORDS)
        tokenizer = _tokenizer(source)
        counted = [encode_record(record, dataset.kind, tokenizer) for record in records]
    except (OSError, DatasetError, StorageError) as error:
        raise EpochsRefused(
            gettext("Can't count the dataset's tokens: %(error)s") % {"error": redact(str(error))}
        ) from None
    sampled = sum(len(ids) for ids, _ in counted)
    records_trained = dataset.samples * (1.0 - (spec.eval_fraction if not spec.eval_dataset_upload_id else 0.0))
    return round(sampled * records_trained / max(len(counted), 1))


def _tokenizer(source: ModelSource):
    """The model's tokenizer; bytes for a catalog model, and for a job's model trained from one (no tokenizer files)."""
    vocab = int(source.config.get("vocab_size") or 0)
    if source.source == "catalog":
        return load_tokenizer(None, vocab)
    if source.snapshot is not None:
        return load_tokenizer(source.snapshot, vocab)
    inside = f"{source.store_folder}/" if source.store_folder else ""
    with staged_tree(
        source.store_prefix, select=lambda name: name.startswith(inside) and is_tokenizer_file(name)
    ) as tree:
        folder = tree / inside if inside else tree
        if not any((folder / name).exists() for name in TOKENIZER_FILES):
            return load_tokenizer(None, vocab)
        return load_tokenizer(folder, vocab)
