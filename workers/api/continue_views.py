"""`POST /api/v1/jobs/{id}/continue/`: a new job that goes on from one of a finished job's checkpoints.

The body takes `checkpoint_step`, `max_steps` (the new total) or `additional_steps`, and any field of a job
spec; what it leaves out is the old job's. The spec is validated as a launch's (JobSpecSerializer), then
workers/services/continuation.py checks and launches it. The portal's Continue button posts the same.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, ErrorDetail, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, errors
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from fleet.choices import TrainingMode
from fleet.models import Job
from kernel.money import to_decimal
from workers.api.job_serializers import JobSerializer
from workers.api.job_spec import JobSpecSerializer
from workers.services.continuation import (
    ContinueRefused,
    check_continuable,
    checkpoint_to_continue,
    continue_job,
    total_steps,
)
from workers.services.launch import LaunchRefused

CONTINUE_FIELDS = ("checkpoint_step", "max_steps", "additional_steps")


def job_spec_data(job: Job) -> dict:
    """The job's settings as the API's job spec takes them: a re-run or a continuation passes the same validation
    as a launch."""
    return {
        "model": job.model_name,
        "dataset": job.dataset,
        "seq_len": job.seq_len,
        "mode": job.mode,
        "lora": dict(job.lora) if job.mode == TrainingMode.LORA and job.lora else None,
        "gradient_checkpointing": job.gradient_checkpointing,
        "eval_dataset": f"upload:{job.eval_dataset_upload_id}" if job.eval_dataset_upload_id else None,
        "eval_fraction": job.eval_fraction,
        "eval_every": job.eval_every,
        "per_device_batch_size": job.per_device_batch_size,
        "max_steps": job.max_steps,
        "policy": job.policy,
        "max_budget": to_decimal(job.max_budget_per_hour),
        "total_budget": to_decimal(job.total_budget) if job.total_budget else None,
        "chip_counts": dict(job.chip_counts) if job.chip_counts else None,
        "name": job.name,
        "spot": job.spot,
        "bid": to_decimal(job.spot_bid_per_hour) if job.spot and job.spot_bid_per_hour is not None else None,
        "allow_on_demand": job.allow_on_demand,
        "allow_other_chips": job.allow_other_chips,
    }


def continuation_data(job: Job, changes: dict, max_steps: int) -> dict:
    """The old job's spec with `changes` on top; its hyperparameters merged key by key (a warm-up given one way
    replaces the other)."""
    hyperparameters = {key: value for key, value in (job.hyperparameters or {}).items() if value is not None}
    given = changes.get("hyperparameters") or {}
    for one, other in (("warmup_steps", "warmup_ratio"), ("warmup_ratio", "warmup_steps")):
        if given.get(one) is not None:
            hyperparameters.pop(other, None)
    hyperparameters.update(given)
    spot = changes.get("spot", job.spot)
    data = {**job_spec_data(job), **({} if spot else {"bid": None}), **changes}
    return {**data, "max_steps": max_steps, "hyperparameters": hyperparameters or None}


class ContinueSerializer(serializers.Serializer):
    """Where to go on from and how far; any job spec field besides (model, mode, lora and seq_len stay)."""

    checkpoint_step = serializers.IntegerField(
        min_value=0,
        required=False,
        allow_null=True,
        help_text="The step of the checkpoint to start from (default: the last)",
    )
    max_steps = serializers.IntegerField(
        min_value=1,
        max_value=settings.JOB_MAX_STEPS,
        required=False,
        allow_null=True,
        help_text="The new total: more than the checkpoint's step (default: the old job's, when the checkpoint is "
        "short of it)",
    )
    additional_steps = serializers.IntegerField(
        min_value=1,
        max_value=settings.JOB_MAX_STEPS,
        required=False,
        allow_null=True,
        help_text="Or steps to train past the checkpoint",
    )


class ContinueDocSerializer(ContinueSerializer, JobSpecSerializer):
    """The request body as the schema shows it: the continue fields and every job spec field, all optional."""

    def get_fields(self):
        fields = super().get_fields()
        fields.pop("n_epochs", None)
        for field in fields.values():
            field.required = False
        return fields


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "job_not_finished"
    answer_with_code = True


def refusal(error: ContinueRefused | LaunchRefused) -> APIException:
    if getattr(error, "status", 400) == 409:
        return Conflict(str(error), code=error.code)
    return ValidationError({error.field: [ErrorDetail(str(error), code=error.code)]})


def continue_from_request(request, job: Job, data) -> Job:
    """Validate and launch the continuation `data` asks for (the API's body, or the portal's form): raises
    the API's 400 or 409 (ValidationError, Conflict)."""
    if not hasattr(data, "keys"):
        raise ValidationError({"non_field_errors": [_("Expected an object of fields.")]})
    known = set(ContinueDocSerializer().fields)
    unknown = sorted(set(data.keys()) - known)
    if unknown:
        raise ValidationError({name: [ErrorDetail(_("Unknown field."), code="unknown_field")] for name in unknown})
    asked = ContinueSerializer(data={name: data[name] for name in CONTINUE_FIELDS if name in data})
    asked.is_valid(raise_exception=True)
    try:
        check_continuable(job)
        checkpoint = checkpoint_to_continue(job, asked.validated_data.get("checkpoint_step"))
        steps = total_steps(
            job, checkpoint, asked.validated_data.get("max_steps"), asked.validated_data.get("additional_steps")
        )
        changes = {name: data[name] for name in data if name not in CONTINUE_FIELDS}
        spec = JobSpecSerializer(data=continuation_data(job, changes, steps), context={"request": request})
        spec.is_valid(raise_exception=True)
        return continue_job(request.user, job, spec.job_spec(), checkpoint)
    except (ContinueRefused, LaunchRefused) as error:
        raise refusal(error) from None


class ContinueView(APIView):
    """Continue a finished job from one of its checkpoints, as a new job."""

    @extend_schema(
        summary="Continue a job",
        description=(
            "Makes a new job that goes on from a checkpoint of this one (a stopped, cancelled, failed or "
            "succeeded job; else 409 `job_not_finished` naming its status): `checkpoint_step` (default the last; "
            "an unknown step is a 400 naming it, with the steps there are), `max_steps` the new total (more than "
            "the checkpoint's step) or `additional_steps`. Any job spec field may change the old job's value "
            "(chips, budgets, policy, spot terms, data, eval, hyperparameters, merged key by key); model, mode, "
            "LoRA settings and seq_len stay, since the checkpoint loads only into its own network (to train its "
            "result as a new model, launch with model `job:<id>`). The new job is a normal job, billed and "
            "insured on its own: its `continued_from` is this job, `start_checkpoint` the checkpoint's key, its "
            "step counter starts at the checkpoint's step, and its ranks resume from that checkpoint, on any "
            "chips and world size, until it saves checkpoints of its own. Refusals of a launch are 400s as for "
            "`POST /jobs/`. Another user's job is a 404."
        ),
        request=ContinueDocSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: JobSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS, 404)},
    )
    @idempotent
    def post(self, request, pk: str):
        job = Job.objects.filter(pk=int(pk), owner=request.user).first() if pk.isascii() and pk.isdigit() else None
        if job is None:
            raise NotFound(_("No such job."))
        new = continue_from_request(request, job, request.data)
        return Response(JobSerializer(new).data, status=status.HTTP_201_CREATED)
