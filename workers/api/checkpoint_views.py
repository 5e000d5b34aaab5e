"""A job's checkpoints in the v1 API: list them with their losses, size and retention, download one as a
Hugging Face model, delete one. Only the job's owner sees them: another user's job is a 404."""

from __future__ import annotations

from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import READ_ERRORS, errors
from fleet.models import Job
from kernel.storage import StorageError
from workers.api.stored_files import StorageDown, tar_response
from workers.services.checkpoint_objects import (
    CheckpointInUse,
    CheckpointNotExported,
    CheckpointNotFound,
    checkpoint_download,
    delete_checkpoint,
    list_checkpoints,
    retention,
)
from workers.services.model_download import MergedNotApplicable


class CheckpointConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = gettext_lazy("The checkpoint can't be deleted now.")
    default_code = "checkpoint_in_use"
    answer_with_code = True


class NotExported(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = gettext_lazy("The checkpoint holds no Hugging Face model.")
    default_code = "checkpoint_not_exported"
    answer_with_code = True


class CheckpointMissing(NotFound):
    default_code = "checkpoint_not_found"
    answer_with_code = True


class CheckpointSerializer(serializers.Serializer):
    step = serializers.IntegerField(help_text="The training step it was saved at: its id in the URLs below.")
    loss = serializers.FloatField(allow_null=True, help_text="The global train loss of that step.")
    eval_loss = serializers.FloatField(
        allow_null=True, help_text="The held-out loss, when it was measured at that step; else null."
    )
    created_at = serializers.DateTimeField(help_text="When it was saved.")
    size_bytes = serializers.IntegerField(
        allow_null=True, help_text="Its stored size (state and model); null until the pruning pass measures it."
    )
    stopping = serializers.BooleanField(help_text="Saved for a stop (a move, a credit stop).")
    kept = serializers.ChoiceField(
        choices=["final", "latest", "stop", "recent", "prunable"],
        help_text="Why pruning keeps it: final, latest (the job resumes from it), stop, recent (among the newest "
        "periodic ones); prunable: the next pass deletes it.",
    )
    kept_because = serializers.CharField(help_text="`kept` in a sentence.")
    deletable = serializers.BooleanField(help_text="False for the checkpoint a job that has not ended resumes from.")
    download_url = serializers.URLField(help_text="Its Hugging Face model (a LoRA job's adapter) as a tar.")


class RetentionSerializer(serializers.Serializer):
    keep_periodic = serializers.IntegerField(help_text="Periodic checkpoints kept per job (CHECKPOINT_KEEP).")
    prune_every_s = serializers.IntegerField(help_text="Seconds between pruning passes (CHECKPOINT_PRUNE_SECONDS).")
    policy = serializers.CharField(help_text="The policy in a sentence.")


class CheckpointListSerializer(serializers.Serializer):
    retention = RetentionSerializer()
    checkpoints = CheckpointSerializer(many=True, help_text="Newest step first.")


def own_job(request, pk: str) -> Job:
    job = Job.objects.filter(owner=request.user, pk=int(pk)).first() if pk.isascii() and pk.isdigit() else None
    if job is None:
        raise NotFound(_("You have no job %(id)s.") % {"id": pk})
    return job


def step_of(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 10:
        raise ValidationError(
            {"step": [_("A checkpoint is named by its step, a whole number; got %(given)s.") % {"given": repr(raw)}]}
        )
    return int(raw)


def checkpoint_rows(request, job: Job) -> list[dict]:
    rows = []
    for entry in list_checkpoints(job):
        row = entry.row
        url = reverse("job-checkpoint-download", kwargs={"pk": job.pk, "step": row.step})
        rows.append(
            {
                "step": row.step,
                "loss": row.loss,
                "eval_loss": row.eval_loss,
                "created_at": row.created_at,
                "size_bytes": row.bytes,
                "stopping": row.stopping,
                "kept": entry.kept,
                "kept_because": entry.kept_because,
                "deletable": entry.deletable,
                "download_url": request.build_absolute_uri(url),
            }
        )
    return rows


JOB_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The job's id.")
STEP = OpenApiParameter(
    "step", int, OpenApiParameter.PATH, description="The checkpoint's step (a whole number; anything else is a 400)."
)


class CheckpointListView(APIView):
    @extend_schema(
        summary="List a job's checkpoints",
        description=(
            "Every checkpoint the job keeps, newest step first: step, train loss, held-out loss (when measured at "
            "that step), when it was saved, its size, and why it is kept; with the retention policy: how many "
            "periodic checkpoints a job keeps and how often the others are pruned."
        ),
        parameters=[JOB_ID],
        responses={200: CheckpointListSerializer, **errors(*READ_ERRORS)},
    )
    def get(self, request, pk: str):
        job = own_job(request, pk)
        return Response({"retention": retention().as_dict(), "checkpoints": checkpoint_rows(request, job)})


class CheckpointView(APIView):
    @extend_schema(
        summary="Delete a checkpoint",
        description=(
            "Deletes the stored checkpoint (its state and model) and its record. 409 `checkpoint_in_use` for the "
            "latest checkpoint of a job that has not ended: the job resumes from it after a move or a restart. "
            "404 `checkpoint_not_found` names the steps the job has; 400 when the step is not a whole number."
        ),
        parameters=[JOB_ID, STEP],
        responses={204: OpenApiResponse(description="Deleted."), **errors(400, *READ_ERRORS, 403, 409)},
    )
    def delete(self, request, pk: str, step: str):
        job, at = own_job(request, pk), step_of(step)
        try:
            delete_checkpoint(job, at)
        except CheckpointNotFound as error:
            raise CheckpointMissing(str(error)) from None
        except CheckpointInUse as error:
            raise CheckpointConflict(str(error)) from None
        except StorageError as error:
            raise StorageDown() from error
        return Response(status=status.HTTP_204_NO_CONTENT)


class CheckpointDownloadView(APIView):
    @extend_schema(
        summary="Download a checkpoint as a model",
        description=(
            "The checkpoint's weights in Hugging Face format as one tar, like the final model's download: "
            "config.json, generation_config.json, model.safetensors and a README.md model card with the "
            "checkpoint's losses. A LoRA job's checkpoint sends its peft adapter; `merged=true` sends merged "
            "weights, which only final and stop checkpoints hold. 409 `checkpoint_not_exported` for a checkpoint "
            "saved without its model; 404 `checkpoint_not_found`; 400 for a step that is not a whole number."
        ),
        parameters=[
            JOB_ID,
            STEP,
            OpenApiParameter("merged", bool, description="LoRA jobs: the merged full weights."),
        ],
        responses={(200, "application/x-tar"): OpenApiTypes.BINARY, **errors(400, *READ_ERRORS, 409)},
    )
    def get(self, request, pk: str, step: str):
        job, at = own_job(request, pk), step_of(step)
        merged = request.query_params.get("merged", "").lower() in ("1", "true", "yes")
        try:
            download = checkpoint_download(job, at, merged=merged)
        except CheckpointNotFound as error:
            raise CheckpointMissing(str(error)) from None
        except MergedNotApplicable as error:
            raise ValidationError({"merged": [str(error)]}, code="merged_not_applicable") from None
        except CheckpointNotExported as error:
            raise NotExported(str(error)) from None
        except StorageError as error:
            raise StorageDown() from error
        return tar_response(download)
