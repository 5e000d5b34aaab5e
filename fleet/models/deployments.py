"""Deployments: a trained model served behind an OpenAI-compatible endpoint on rented chips (docs/SERVING.md).

A deployment's replicas are jobs (`Job.deployment`): each replica is placed, allocated, billed per second,
reclaimed and moved like any job, by the same code. Its one "rank" runs a serving engine instead of training
(hosts/serving/replica.py) and reports where it answers (`Job.serving`). The gateway (openai_api/gateway.py)
sends each request to a ready replica and records it (`ServedRequest`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from base.stored_text import StatusReasonMixin
from fleet.choices import Policy


class DeploymentStatus(models.TextChoices):
    DEPLOYING = "deploying", "Deploying"  # a replica is starting and none is ready
    READY = "ready", "Ready"  # at least one replica answers
    IDLE = "idle", "Scaled to zero"  # no replica: the next request starts one (a cold start)
    STOPPED = "stopped", "Stopped"  # deleted by its owner, or stopped by its budget or credit: never restarts
    FAILED = "failed", "Failed"  # its replicas kept failing to start

    @classmethod
    def live(cls) -> set[str]:
        return {cls.DEPLOYING, cls.READY, cls.IDLE}


class Deployment(StatusReasonMixin, models.Model):
    """One model served under one name, by 0..max_replicas replicas of `chips_per_replica` chips each."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="deployments")
    # What a request's `model` names (kernel.serving.SERVED_NAME); unique among the owner's live deployments.
    name = models.CharField(max_length=64)
    model_name = models.CharField(max_length=200)  # job:<id>, model:<id> or a catalog model
    chip = models.CharField(max_length=40, blank=True, help_text=_("A chip type's slug; empty: the planner picks"))
    chips_per_replica = models.PositiveSmallIntegerField(default=1)
    policy = models.CharField(max_length=20, choices=Policy.choices, default=Policy.COST_PERFORMANCE)
    max_budget_per_hour = models.BigIntegerField(help_text=_("micro-units per hour, per replica"))
    total_budget = models.BigIntegerField(null=True, blank=True, help_text=_("micro-units, every replica together"))
    spot = models.BooleanField(default=False)
    spot_bid_per_hour = models.BigIntegerField(null=True, blank=True, help_text=_("micro-units per chip-hour"))
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    idle_timeout_s = models.PositiveIntegerField(default=300)
    max_model_len = models.PositiveIntegerField(null=True, blank=True, help_text=_("Prompt and answer, in tokens"))
    status = models.CharField(
        max_length=12, choices=DeploymentStatus.choices, default=DeploymentStatus.DEPLOYING, db_index=True
    )
    status_reason = models.TextField(blank=True)
    # The reason's msgid and values (base.stored_text): the pages show it in the reader's language.
    status_reason_text = models.JSONField(default=dict, db_default={}, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_request_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Running totals the gateway adds to with each request (F() updates: no lost increments).
    requests = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"],
                condition=~Q(status="stopped"),
                name="deployment_live_name_unique",
            ),
            models.CheckConstraint(condition=Q(max_replicas__gte=1), name="deployment_max_replicas_positive"),
            models.CheckConstraint(
                condition=Q(min_replicas__lte=models.F("max_replicas")), name="deployment_min_not_above_max"
            ),
            models.CheckConstraint(condition=Q(max_budget_per_hour__gt=0), name="deployment_budget_positive"),
            models.CheckConstraint(condition=Q(chips_per_replica__gte=1), name="deployment_has_chips"),
        ]

    def __str__(self) -> str:
        return f"Deployment {self.pk} ({self.name})"

    @property
    def is_live(self) -> bool:
        return self.status in DeploymentStatus.live()


class ServedRequest(models.Model):
    """One request the gateway answered (or refused for lack of a replica): the deployment page's charts."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="served")
    replica = models.ForeignKey("fleet.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    route = models.CharField(max_length=20)  # "chat" or "completions"
    stream = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(db_index=True)
    first_byte_ms = models.FloatField(null=True, blank=True)  # time to the first byte (a stream's first token)
    duration_ms = models.FloatField()
    cold_start = models.BooleanField(default=False)  # it waited for a replica to start from zero

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["deployment", "started_at"], name="served_by_deployment_time")]

    def __str__(self) -> str:
        return f"{self.route} to deployment {self.deployment_id} at {self.started_at:%Y-%m-%d %H:%M:%S}"
