"""A job's hyperparameters as its ranks run with them: the stored settings, defaults filled in."""

from __future__ import annotations

from fleet.models import Job
from kernel.hyperparameters import PRETRAINED, SCRATCH, Hyperparameters, resolve
from kernel.modelspecs import ModelSpec, UnknownModel, resolve_model


def origin_of_source(source) -> tuple[str, int]:
    """(where the weights come from, parameters) of a resolved model source (workers.services.models)."""
    return (SCRATCH if source.source == "catalog" else PRETRAINED), source.shape.parameters


def job_hyperparameters(job: Job) -> Hyperparameters:
    """What the job's ranks run with; a row from before hyperparameters gets the defaults of its kind."""
    try:
        resolve_model(job.model_name)
        origin = SCRATCH  # a catalog config: random initial weights
    except UnknownModel:
        origin = PRETRAINED
    parameters = ModelSpec.from_dict(job.model_spec).parameters if job.model_spec else 0
    return resolve(Hyperparameters.from_dict(job.hyperparameters), job.mode, origin, parameters)
