"""Serializers of jobs and what they report, for the v1 API (what a job asks for: workers/api/job_spec.py)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from base.api.fields import MoneyField
from base.api.serializers import FieldsBuiltOnce
from billing.services.statements import job_charged
from fleet.models import Dataset, Job
from kernel.logtext import is_library_noise
from kernel.money import format_amount
from kernel.spec import start_step_of
from workers.api.job_spec import format_plan
from workers.api.tracking import PUBLIC_SCHEMA
from workers.models import JobEval, JobEvent, JobLogLine, JobMigration
from workers.services.tracking import public_tracking


class JobMigrationSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    refund = MoneyField()
    downtime_seconds = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = JobMigration
        fields = [
            "id",
            "reason",
            "detail",
            "status",
            "from_epoch",
            "to_epoch",
            "nodes",
            "notice_at",
            "notice_seconds",
            "step_at_notice",
            "checkpoint_step",
            "checkpoint_at",
            "resumed_at",
            "resume_step",
            "steps_lost",
            "lost_seconds",
            "downtime_seconds",
            "refund",
        ]
        read_only_fields = fields


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    model = serializers.CharField(source="model_name")
    max_budget = MoneyField(source="max_budget_per_hour")
    total_budget = MoneyField()
    bid = MoneyField(source="spot_bid_per_hour")
    cost = serializers.SerializerMethodField(help_text="Charged so far, in currency units")
    migrations = JobMigrationSerializer(many=True, read_only=True)
    plan = serializers.SerializerMethodField()
    progress = serializers.FloatField(read_only=True)
    eval_dataset = serializers.SerializerMethodField(help_text="'upload:<id>' of the eval dataset, or null")
    sync_mode = serializers.CharField(read_only=True, help_text="'step', 'diloco', or '' (the planner's choice)")
    island_stats = serializers.JSONField(
        read_only=True, help_text="A run of islands: each island's last figures, by island number (docs/ISLANDS.md)"
    )

    continued_from = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The job this one continues (POST /jobs/{id}/continue/); null for a fresh job",
    )
    start_checkpoint_step = serializers.SerializerMethodField(
        help_text="A continuation: the step of the checkpoint it started from (its step counter starts there)"
    )

    tracking = serializers.SerializerMethodField()

    @extend_schema_field(PUBLIC_SCHEMA)
    def get_tracking(self, job: Job) -> dict:
        return public_tracking(job.tracking)

    def get_eval_dataset(self, job: Job) -> str | None:
        return f"upload:{job.eval_dataset_upload_id}" if job.eval_dataset_upload_id else None

    def get_start_checkpoint_step(self, job: Job) -> int | None:
        return start_step_of(job.start_checkpoint) if job.start_checkpoint else None

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "status",
            "status_reason",
            "model",
            "dataset",
            "per_device_batch_size",
            "max_steps",
            "n_epochs",
            "policy",
            "max_budget",
            "total_budget",
            "chip_counts",
            "spot",
            "bid",
            "allow_on_demand",
            "allow_other_chips",
            "seq_len",
            "mode",
            "lora",
            "gradient_checkpointing",
            "eval_dataset",
            "eval_fraction",
            "eval_every",
            "sync_mode",
            "sync_every",
            "hyperparameters",
            "tracking",
            "continued_from",
            "start_checkpoint_step",
            "island_stats",
            "cost",
            "migrations",
            "epoch",
            "step",
            "progress",
            "loss",
            "first_loss",
            "eval_loss",
            "tokens_per_s",
            "latest_checkpoint_step",
            "plan",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_plan(self, job: Job) -> dict | None:
        return format_plan(job.plan)

    @extend_schema_field({"type": "string", "format": "decimal", "example": "0.42"})
    def get_cost(self, job: Job) -> str:
        # Annotated by the API's queryset (one query for a whole page), or asked for this one job.
        charged = job.charged if hasattr(job, "charged") else job_charged(job)
        return format_amount(charged or 0)


class JobEvalSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEval
        fields = ["step", "eval_loss", "eval_tokens", "epoch", "created_at"]
        read_only_fields = fields


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "kind", "message", "data", "epoch", "created_at"]

    def to_representation(self, instance):
        # The message's msgid and values (`data["text"]`) are the pages' business: the API's message is English.
        answer = super().to_representation(instance)
        if isinstance(answer.get("data"), dict):
            answer["data"] = {key: value for key, value in answer["data"].items() if key != "text"}
        return answer


class JobLogLineSerializer(serializers.ModelSerializer):
    library = serializers.SerializerMethodField(
        help_text="A library's warning, INFO log or progress bar (the job page folds these away), not the rank's own."
    )

    class Meta:
        model = JobLogLine
        fields = ["id", "epoch", "rank", "line", "library", "created_at"]

    def get_library(self, line: JobLogLine) -> bool:
        return is_library_noise(line.line)


class DatasetSerializer(serializers.ModelSerializer):
    reference = serializers.CharField(read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "reference", "name", "kind", "size_bytes", "samples", "created_at"]
        read_only_fields = fields
