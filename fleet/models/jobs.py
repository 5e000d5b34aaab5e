"""Training jobs and the chips they hold (allocations)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from base.stored_text import StatusReasonMixin
from fleet.choices import AllocationMode, JobEventKind, JobStatus, Policy, TrainingMode
from fleet.fields import PlanField
from kernel.money import format_amount


class Job(StatusReasonMixin, models.Model):
    """A training run: what to train, under which policy and budget, and where it stands."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs", verbose_name=_("owner")
    )
    name = models.CharField(max_length=120, blank=True, verbose_name=_("name"))
    model_name = models.CharField(
        max_length=200, verbose_name=_("model name")
    )  # a catalog name, model:<id>, or a cached Hub id
    dataset = models.CharField(max_length=120, default="synthetic", verbose_name=_("dataset"))
    dataset_upload = models.ForeignKey(
        "fleet.Dataset",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        verbose_name=_("dataset upload"),
    )
    per_device_batch_size = models.PositiveIntegerField(verbose_name=_("per device batch size"))
    max_steps = models.PositiveIntegerField(verbose_name=_("max steps"))
    policy = models.CharField(
        max_length=20, choices=Policy.choices, default=Policy.COST_PERFORMANCE, verbose_name=_("policy")
    )
    max_budget_per_hour = models.BigIntegerField(
        help_text=_("micro-units per hour"), verbose_name=_("max budget per hour")
    )
    total_budget = models.BigIntegerField(
        null=True, blank=True, help_text=_("micro-units"), verbose_name=_("total budget")
    )
    chip_counts = models.JSONField(
        null=True, blank=True, help_text=_("Chips picked by hand: {slug: count}"), verbose_name=_("chip counts")
    )
    # Spot: the job bids up to `spot_bid_per_hour` per chip-hour for spot chips, and says where it may go
    # when they are reclaimed (on-demand chips, other chip types).
    spot = models.BooleanField(default=False, verbose_name=_("spot"))
    spot_bid_per_hour = models.BigIntegerField(
        null=True, blank=True, help_text=_("micro-units per chip-hour"), verbose_name=_("spot bid per hour")
    )
    allow_on_demand = models.BooleanField(default=True, verbose_name=_("allow on demand"))
    allow_other_chips = models.BooleanField(default=True, verbose_name=_("allow other chips"))
    # How it trains: every weight, or a LoRA adapter ({"r", "alpha", "dropout", "target_modules"}) on a frozen base.
    seq_len = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Tokens per sample; empty: the model's"), verbose_name=_("seq len")
    )
    mode = models.CharField(
        max_length=8, choices=TrainingMode.choices, default=TrainingMode.FULL, verbose_name=_("mode")
    )
    lora = models.JSONField(null=True, blank=True, verbose_name=_("lora"))
    gradient_checkpointing = models.BooleanField(default=False, verbose_name=_("gradient checkpointing"))
    # The model as planning sized it at launch (kernel.modelspecs.ModelSpec.as_dict(): an upload's or a Hub
    # model's exact shape, LoRA's trainable share). The market reads it to tell which chips the job fits: it
    # can't resolve uploads and Hub ids itself (it may not call workers.services). None: rows from before.
    model_spec = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("model spec"))
    # Held-out loss: an eval dataset of the owner's, or a fraction of the training records; every N steps.
    eval_dataset_upload = models.ForeignKey(
        "fleet.Dataset",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="eval_jobs",
        verbose_name=_("eval dataset upload"),
    )
    eval_fraction = models.FloatField(default=0, verbose_name=_("eval fraction"))
    eval_every = models.PositiveIntegerField(default=0, verbose_name=_("eval every"))
    # A run of islands: how they keep in step ("step", "diloco"; "": the planner chooses) and diloco's H.
    sync_mode = models.CharField(
        max_length=8,
        blank=True,
        default="",
        choices=[("step", "step"), ("diloco", "diloco")],
        verbose_name=_("sync mode"),
    )
    sync_every = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("sync every"))
    # How the optimizer steps (kernel.hyperparameters.Hyperparameters.as_dict()): the owner's settings with
    # the job's defaults filled in at submission, so the page shows what the ranks run with. {}: rows from before.
    hyperparameters = models.JSONField(default=dict, blank=True, verbose_name=_("hyperparameters"))
    # Experiment tracking besides TensorBoard (docs/FINE_TUNING.md, "Tracking"): {"wandb": {...}, "mlflow": {...}},
    # the owner's W&B key and MLflow token Fernet-encrypted (workers/services/tracking.py). {}: TensorBoard only.
    tracking = models.JSONField(default=dict, blank=True, verbose_name=_("tracking"))
    # Asked as passes over the dataset: max_steps was worked out from them at launch.
    n_epochs = models.FloatField(null=True, blank=True, verbose_name=_("n epochs"))
    # A continuation (POST /api/v1/jobs/<id>/continue/): the job it goes on from and the checkpoint it starts
    # at (that job's stored checkpoint key); its own checkpoints, once it saves some, take over.
    continued_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="continuations",
        verbose_name=_("continued from"),
    )
    start_checkpoint = models.CharField(max_length=500, blank=True, verbose_name=_("start checkpoint"))
    # Chips an on-demand job is waiting for that spot allocations hold now: {slug: count}. The auction
    # takes them out of spot capacity, so the lowest bids are reclaimed first.
    waiting_for = models.JSONField(null=True, blank=True, verbose_name=_("waiting for"))
    # Credit held while the job waits to be placed (hold minutes of its plan at launch): every later
    # launch, bid and placement of the owner counts it against the balance until the job is placed.
    credit_hold = models.BigIntegerField(default=0, help_text=_("micro-units"), verbose_name=_("credit hold"))
    # A queued job is re-planned with backoff (not before `next_plan_at`), or sooner when capacity changes.
    next_plan_at = models.DateTimeField(null=True, blank=True, verbose_name=_("next plan at"))
    plan_attempts = models.PositiveSmallIntegerField(default=0, verbose_name=_("plan attempts"))
    status = models.CharField(
        max_length=20, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True, verbose_name=_("status")
    )
    status_reason = models.TextField(blank=True, verbose_name=_("status reason"))
    # The reason's msgid and values (base.stored_text): the pages show it in the reader's language.
    status_reason_text = models.JSONField(
        default=dict, db_default={}, blank=True, verbose_name=_("status reason (message id)")
    )
    # Bumped on every (re)placement; ranks and agents of an older epoch are fenced out.
    epoch = models.PositiveIntegerField(default=0, verbose_name=_("epoch"))
    plan = PlanField(null=True, blank=True, verbose_name=_("plan"))
    # The plan the owner was quoted at launch (else the first placement's): the job page compares the run
    # with it. `plan` is the current placement's and changes with every re-plan; this never does.
    quote = PlanField(null=True, blank=True, editable=False, verbose_name=_("quote"))
    step = models.PositiveIntegerField(default=0, verbose_name=_("step"))
    tokens = models.PositiveBigIntegerField(default=0, verbose_name=_("tokens"))
    loss = models.FloatField(null=True, blank=True, verbose_name=_("loss"))
    first_loss = models.FloatField(null=True, blank=True, verbose_name=_("first loss"))
    eval_loss = models.FloatField(null=True, blank=True, verbose_name=_("eval loss"))
    tokens_per_s = models.FloatField(null=True, blank=True, verbose_name=_("tokens per s"))
    # A run of islands: each island's last report, by island index: {"stack", "mode", "syncs", "bytes_across",
    # "members", "step", "change"} (hosts/runtime/islands/; the job page's islands table).
    island_stats = models.JSONField(default=dict, blank=True, verbose_name=_("island stats"))
    # A serving replica (docs/SERVING.md): the deployment it serves, and what its engine last reported
    # (kernel.serving.EngineStatus.as_dict(): state, url, engine, simulated, error). Not a training run.
    deployment = models.ForeignKey(
        "fleet.Deployment",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replicas",
        verbose_name=_("deployment"),
    )
    serving = models.JSONField(default=dict, blank=True, verbose_name=_("serving"))
    latest_checkpoint = models.CharField(max_length=500, blank=True, verbose_name=_("latest checkpoint"))
    latest_checkpoint_step = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("latest checkpoint step")
    )
    latest_checkpoint_at = models.DateTimeField(null=True, blank=True, verbose_name=_("latest checkpoint at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))
    cancel_requested_at = models.DateTimeField(null=True, blank=True, verbose_name=_("cancel requested at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        db_table = "workers_job"  # its table from before the move
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(max_budget_per_hour__gt=0), name="job_budget_positive"),
            models.CheckConstraint(condition=Q(max_steps__gt=0), name="job_steps_positive"),
            models.CheckConstraint(condition=Q(per_device_batch_size__gt=0), name="job_batch_positive"),
            models.CheckConstraint(condition=Q(credit_hold__gte=0), name="job_credit_hold_not_negative"),
        ]
        indexes = [models.Index(fields=["status", "next_plan_at"], name="job_planning_queue")]

    def __str__(self) -> str:
        return f"Job {self.pk} ({self.model_name})"

    @property
    def is_finished(self) -> bool:
        return self.status in JobStatus.finished()

    def operator_cancel_reason(self) -> str:
        """The reason the operator gave for cancelling this job; "" when nobody but its owner did."""
        asked = self.events.filter(kind=JobEventKind.CANCEL_REQUESTED, data__by="operator").first()
        return asked.data.get("reason", "") if asked else ""

    @property
    def progress(self) -> float:
        return min(1.0, self.step / self.max_steps) if self.max_steps else 0.0

    @property
    def budget_display(self) -> str:
        return format_amount(self.max_budget_per_hour)


class AllocationQuerySet(models.QuerySet):
    def open(self) -> AllocationQuerySet:
        """Allocations being billed now."""
        return self.filter(ended_at__isnull=True)

    def holding(self, now) -> AllocationQuerySet:
        """Allocations whose chips nobody else may use at `now` (open, or reclaimed and still leaving)."""
        return self.filter(Q(ended_at__isnull=True) | Q(held_until__gt=now))


class Allocation(models.Model):
    """Chips of one node held by one job from `started_at` until `ended_at`."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="allocations", verbose_name=_("job"))
    node = models.ForeignKey("fleet.Node", on_delete=models.PROTECT, related_name="allocations", verbose_name=_("node"))
    chip_type = models.ForeignKey(
        "fleet.ChipType", on_delete=models.PROTECT, related_name="+", verbose_name=_("chip type")
    )
    chips = models.PositiveSmallIntegerField(verbose_name=_("chips"))
    mode = models.CharField(
        max_length=12, choices=AllocationMode.choices, default=AllocationMode.ON_DEMAND, verbose_name=_("mode")
    )
    epoch = models.PositiveIntegerField(verbose_name=_("epoch"))
    started_at = models.DateTimeField(verbose_name=_("started at"))
    ended_at = models.DateTimeField(null=True, blank=True, verbose_name=_("ended at"))
    # Final once the allocation ended and the meter folded it into its billing line
    # (billing.models.BillingLine, the job's chips of this type and mode): billed through its last
    # whole second, and what that cost (micro-units, the price integrated from started_at to
    # billed_through, rounded once). While it is open its billing lives on the line, and these stay
    # at started_at and 0.
    billed_through = models.DateTimeField(verbose_name=_("billed through"))
    charged_total = models.BigIntegerField(default=0, verbose_name=_("charged total"))
    # A reclaimed allocation stops billing at once (`ended_at`) but keeps its chips until its ranks
    # have checkpointed and left, or the notice runs out, whichever comes first.
    held_until = models.DateTimeField(null=True, blank=True, verbose_name=_("held until"))

    objects = AllocationQuerySet.as_manager()

    class Meta:
        db_table = "workers_allocation"  # its table from before the move
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        ordering = ["started_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(chips__gte=1), name="allocation_has_chips"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="allocation_ends_after_start",
            ),
        ]
        indexes = [models.Index(fields=["node"], condition=Q(ended_at__isnull=True), name="open_allocations_by_node")]

    def __str__(self) -> str:
        return f"{self.chips}× {self.chip_type_id} on {self.node_id} for job {self.job_id}"
