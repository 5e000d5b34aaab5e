"""`POST /v1/fine_tuning/jobs`: OpenAI's request turned into a Starverse job spec, validated and launched.

The body is checked for OpenAI's shape here; the spec then goes through the job API's own validation
(workers.api.job_spec.JobSpecSerializer) and the one launch path (workers.services.launch), and each
refusal is answered as OpenAI's 400 naming OpenAI's parameter. How each parameter maps: docs/FINE_TUNING.md,
"The OpenAI fine-tuning API".
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Real

from django.conf import settings

from fleet.models import Dataset
from kernel.spec import JobSpec
from openai_api.errors import invalid
from openai_api.objects import FILE, pk_of
from workers.api.job_spec import JobSpecSerializer
from workers.services.launch import LaunchRefused, launch

AUTO = "auto"
AUTO_EPOCHS = 3  # "auto" epochs, as OpenAI's usual choice for small datasets
AUTO_BATCH_SIZE = 4  # "auto" batch: the per-device batch Starverse's examples use
MAX_SUFFIX = 64
KNOWN = {
    "model",
    "training_file",
    "validation_file",
    "hyperparameters",
    "method",
    "suffix",
    "seed",
    "metadata",
    "integrations",
}
HYPERPARAMETERS = ("n_epochs", "batch_size", "learning_rate_multiplier")
# The job spec's fields (and launch refusals) as OpenAI's parameters; None: no parameter of OpenAI's.
PARAMS = {
    "model": "model",
    "dataset": "training_file",
    "eval_dataset": "validation_file",
    "per_device_batch_size": "hyperparameters.batch_size",
    "n_epochs": "hyperparameters.n_epochs",
    "max_steps": "hyperparameters.n_epochs",
    "name": "suffix",
    "hyperparameters": "seed",
}


def create_job(request):
    """Launch the job the body asks for; raises OpenAIError naming the parameter at fault."""
    body = request.data
    if not isinstance(body, dict):
        raise invalid(None, "The body must be a JSON object.")
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise invalid(unknown[0], f"Unrecognized request argument supplied: {unknown[0]}")
    for name in ("metadata", "integrations"):
        if body.get(name):
            raise invalid(name, f"{name} is not supported by Starverse's fine-tuning API; leave it out.")
    model = _string(body, "model", required=True)
    training = _own_file(request, body, "training_file", required=True)
    validation = _own_file(request, body, "validation_file")
    given = _hyperparameters(body)
    suffix = _string(body, "suffix") or ""
    if len(suffix) > MAX_SUFFIX:
        raise invalid("suffix", f"suffix may be at most {MAX_SUFFIX} characters.")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise invalid("seed", "seed must be an integer.")
    spec = _spec(request, model, training, validation, given, suffix, seed)
    try:
        return launch(request.user, spec)
    except LaunchRefused as error:
        raise invalid(PARAMS.get(error.field), str(error), code=error.code) from None


def _spec(request, model, training, validation, given: dict, suffix: str, seed) -> JobSpec:
    epochs, batch = given.get("n_epochs", AUTO), given.get("batch_size", AUTO)
    data = {
        "model": model,
        "dataset": training.reference,
        "eval_dataset": validation.reference if validation else None,
        "per_device_batch_size": AUTO_BATCH_SIZE if batch == AUTO else batch,
        "n_epochs": AUTO_EPOCHS if epochs == AUTO else epochs,
        "max_budget": settings.OPENAI_API_MAX_BUDGET,
        "name": suffix,
        "hyperparameters": {"seed": seed},
    }
    serializer = JobSpecSerializer(data=data, context={"request": request})
    if not serializer.is_valid():
        field, messages = next(iter(serializer.errors.items()))
        if isinstance(messages, dict):  # a field made of fields: hyperparameters' seed
            messages = next(iter(messages.values()))
        raise invalid(PARAMS.get(field), str(messages[0]), code=getattr(messages[0], "code", None))
    spec = serializer.job_spec()
    multiplier = given.get("learning_rate_multiplier", AUTO)
    if multiplier == AUTO:
        return spec
    rate = spec.hyperparameters["learning_rate"] * multiplier  # the job's default rate, scaled
    if not 1e-9 <= rate <= 1.0:
        raise invalid(
            "hyperparameters.learning_rate_multiplier",
            f"learning_rate_multiplier {multiplier} gives a learning rate of {rate:.3g} for this job (its default "
            f"is {spec.hyperparameters['learning_rate']:.3g}); the rate must be between 1e-9 and 1.",
        )
    return replace(spec, hyperparameters={**spec.hyperparameters, "learning_rate": rate})


def _string(body: dict, name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise invalid(
            name, f"{name} is required: a non-empty string." if value is None else f"{name} must be a string."
        )
    return value.strip()


def _own_file(request, body: dict, name: str, required: bool = False) -> Dataset | None:
    file_id = _string(body, name, required)
    if file_id is None:
        return None
    pk = pk_of(FILE, file_id)
    dataset = Dataset.objects.filter(pk=pk, owner=request.user).first() if pk is not None else None
    if dataset is None:
        raise invalid(name, f"Invalid file ID {file_id!r}: no file of yours has it (see GET /v1/files).")
    return dataset


def _hyperparameters(body: dict) -> dict:
    """The supervised hyperparameters, from `hyperparameters` or `method` (not both), each checked."""
    legacy, method = body.get("hyperparameters"), body.get("method")
    prefix = "hyperparameters"
    if method is not None:
        if not isinstance(method, dict) or method.get("type") != "supervised":
            kind = method.get("type") if isinstance(method, dict) else method
            raise invalid("method.type", f"Only the supervised method is supported, not {kind!r}.")
        if legacy:
            raise invalid("hyperparameters", "Give the hyperparameters in method, or in hyperparameters, not both.")
        legacy = (
            (method.get("supervised") or {}).get("hyperparameters")
            if isinstance(method.get("supervised"), dict)
            else None
        )
        prefix = "method.supervised.hyperparameters"
    legacy = legacy or {}
    if not isinstance(legacy, dict):
        raise invalid(prefix, f"{prefix} must be an object.")
    unknown = sorted(set(legacy) - set(HYPERPARAMETERS))
    if unknown:
        raise invalid(
            f"{prefix}.{unknown[0]}", f"Unknown hyperparameter {unknown[0]!r}; known: {', '.join(HYPERPARAMETERS)}."
        )
    checked = {}
    for name, value in legacy.items():
        if value == AUTO:
            continue
        integral = name != "learning_rate_multiplier"
        if isinstance(value, bool) or not isinstance(value, int if integral else Real) or value <= 0:
            what = "a positive integer" if integral else "a positive number"
            raise invalid(f"{prefix}.{name}", f"{name} must be 'auto' or {what}, not {value!r}.")
        checked[name] = value
    return checked
