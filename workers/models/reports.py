"""What jobs and nodes report: timeline events, metrics, evals, log lines, measured throughput and bridges,
rank exits."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from fleet.choices import JobEventKind
from fleet.models import Job


class JobEvent(models.Model):
    """A step in a job's life, shown on its timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=JobEventKind.choices)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    epoch = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class JobMetric(models.Model):
    """One rank's numbers for one step."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    epoch = models.PositiveIntegerField()
    rank = models.PositiveSmallIntegerField()
    step = models.PositiveIntegerField()
    loss = models.FloatField(null=True)  # None: the step's batch had no target tokens
    tokens_per_s = models.FloatField()
    step_time_s = models.FloatField(default=0)
    samples_seen = models.PositiveBigIntegerField(default=0)
    memory_mb = models.FloatField(default=0)
    chip_type = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["step", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "epoch", "rank", "step"], name="one_metric_per_rank_step")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} rank {self.rank} step {self.step}: loss {self.loss}"


class JobEval(models.Model):
    """The held-out loss after a step: mean cross-entropy over the eval records' target tokens."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="evals")
    epoch = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    eval_loss = models.FloatField()
    eval_tokens = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="one_eval_per_job_step")]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}: eval loss {self.eval_loss:.4f}"


class JobLogLine(models.Model):
    """A line a rank printed."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    epoch = models.PositiveIntegerField()
    rank = models.PositiveSmallIntegerField()
    line = models.TextField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id} rank {self.rank}: {self.line[:80]}"


class MeasuredThroughput(models.Model):
    """What the platform has measured a chip type do on a model (tokens/s per chip)."""

    model_name = models.CharField(max_length=200)  # a catalog name, model:<id>, or a cached Hub id
    chip_type = models.ForeignKey("fleet.ChipType", on_delete=models.CASCADE, related_name="+")
    simulated = models.BooleanField(default=False)
    tokens_per_s = models.FloatField()
    samples = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model_name", "chip_type", "simulated"], name="one_measure_per_model_chip")
        ]

    def __str__(self) -> str:
        return f"{self.model_name} on {self.chip_type_id}: {self.tokens_per_s:.0f} tokens/s"


class NodeThroughput(models.Model):
    """What one node has delivered on one model: the per-rank speed of its ranks inside a whole
    job (the wait for slower peers and the collectives included, and the host's CPU limits when it
    simulates chips), and the seconds a job spent starting there before its first step and
    finishing after its last. Quotes use it in place of the chip's modelled speed once it exists."""

    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="measured")
    model_name = models.CharField(max_length=200)
    tokens_per_s = models.FloatField(help_text=_("Per rank in a run's steady steps; the median of the recent runs"))
    overhead_s = models.FloatField(
        default=0,
        help_text=_("Start-up before the first step plus finishing after the last; median of the recent runs"),
    )
    spread = models.FloatField(default=0, help_text=_("Mean of |estimate − run| / run over the recent runs"))
    recent = models.JSONField(default=list, help_text=_("The last runs: [tokens/s per rank, overhead s, run s]"))
    samples = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "model_name"], name="one_measure_per_node_model")]

    def __str__(self) -> str:
        return f"{self.model_name} on node {self.node_id}: {self.tokens_per_s:.0f} tokens/s per rank"


class BridgeMeasurement(models.Model):
    """The bridge between islands as one node measured it: the Gbit/s its island leader's allreduces
    across the bridge achieved (an effective throughput: gloo's ring and the links' latency included,
    hosts/runtime/islands/bridge.py). The planner prices the bridge at it in place of its pool's
    declared `bridge_gbps` once it exists."""

    node = models.OneToOneField("fleet.Node", on_delete=models.CASCADE, related_name="bridge_measurement")
    gbps = models.FloatField(help_text=_("The median of the recent reports' Gbit/s"))
    recent = models.JSONField(default=list, help_text=_("The last reports' Gbit/s, oldest first"))
    samples = models.PositiveIntegerField(default=0, help_text=_("Reports folded in, all time"))
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"bridge of node {self.node_id}: {self.gbps:.3g} Gbit/s measured"


class RankExit(models.Model):
    """How one rank of one placement ended."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="rank_exits")
    epoch = models.PositiveIntegerField()
    rank = models.PositiveSmallIntegerField()
    code = models.IntegerField()
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "epoch", "rank"], name="one_exit_per_rank")]

    def __str__(self) -> str:
        return f"job {self.job_id} epoch {self.epoch} rank {self.rank} exited {self.code}"
