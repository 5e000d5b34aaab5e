"""What a user asks to train: the job spec as the API and the train page validated it.

One typed value crosses every boundary a spec crosses (API or page → launch → planning → the job's
row → re-planning after a move), instead of a dict read by key. Money is integer micro-units.
No Django here: a `Job` row turns into a spec with `JobSpec.of_job`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# The job's columns a spec fills; the rest of the spec only steers a re-plan.
JOB_COLUMNS = (
    "name",
    "model_name",
    "dataset",
    "dataset_upload_id",
    "per_device_batch_size",
    "max_steps",
    "policy",
    "max_budget_per_hour",
    "total_budget",
    "chip_counts",
    "spot",
    "spot_bid_per_hour",
    "allow_on_demand",
    "allow_other_chips",
    "seq_len",
    "mode",
    "lora",
    "gradient_checkpointing",
    "eval_dataset_upload_id",
    "eval_fraction",
    "eval_every",
    "sync_mode",
    "sync_every",
    "hyperparameters",
    "n_epochs",
    "tracking",
)


@dataclass(frozen=True)
class JobSpec:
    """A training run to plan: model and mode, data and eval, batch and steps, policy, budgets, spot terms,
    chips by hand.

    `global_batch` and `chip_types` pin a re-plan: a job resuming from a checkpoint keeps its global
    batch (so the optimisation goes on unchanged), and one that may not change chip types keeps them;
    `excluded_chip_types` are left out of it.
    """

    model_name: str
    per_device_batch_size: int
    max_steps: int
    max_budget_per_hour: int
    policy: str = "cost-performance"
    name: str = ""
    dataset: str = "synthetic"
    dataset_upload_id: int | None = None
    total_budget: int | None = None
    chip_counts: Mapping[str, int] | None = None
    spot: bool = False
    spot_bid_per_hour: int | None = None
    allow_on_demand: bool = True
    allow_other_chips: bool = True
    seq_len: int | None = None  # tokens per sample; None: the model's default
    mode: str = "full"  # or "lora": an adapter on the frozen model
    lora: Mapping[str, Any] | None = None  # r, alpha, dropout, target_modules
    gradient_checkpointing: bool = False
    eval_dataset_upload_id: int | None = None
    eval_fraction: float = 0.0
    eval_every: int = 0
    sync_mode: str = ""  # islands: "step" or "diloco"; "": the planner's choice (kernel/planner/islands.py)
    sync_every: int | None = None  # diloco's inner steps between syncs; None: the planner's
    # kernel.hyperparameters.Hyperparameters.as_dict(), the job's defaults filled in ({}: every default)
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    # W&B and MLflow settings (docs/FINE_TUNING.md, "Tracking"), the secrets already encrypted by the web tier
    # (workers/services/tracking.py); {}: TensorBoard only.
    tracking: Mapping[str, Any] = field(default_factory=dict)
    # Passes over the dataset instead of max_steps: the launch works max_steps out from the dataset's
    # tokens and the planned global batch (workers/services/epochs.py), and keeps that batch.
    n_epochs: float | None = None
    global_batch: int | None = None
    # A continuation's steps already trained (its start checkpoint's step): its plans count the steps left,
    # max_steps - start_step. Not a column: the job's start_checkpoint says it (`start_step_of`).
    start_step: int = 0
    chip_types: tuple[str, ...] | None = field(default=None)
    # Chip types a re-plan must leave out: those whose last bid the owner cancelled (market.services.bids).
    excluded_chip_types: tuple[str, ...] = ()

    @property
    def spot_only(self) -> bool:
        """Spot chips only: a spot job that may not fall back to on-demand chips."""
        return self.spot and not self.allow_on_demand

    def job_columns(self) -> dict[str, Any]:
        """Keyword arguments for the job's row."""
        return {name: getattr(self, name) for name in JOB_COLUMNS}

    def pinned(self, *, global_batch: int | None, chip_types: tuple[str, ...] | None) -> JobSpec:
        return replace(self, global_batch=global_batch, chip_types=chip_types)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["chip_counts"] = dict(self.chip_counts) if self.chip_counts is not None else None
        data["lora"] = dict(self.lora) if self.lora is not None else None
        data["hyperparameters"] = dict(self.hyperparameters)
        data["tracking"] = dict(self.tracking)
        data["chip_types"] = list(self.chip_types) if self.chip_types is not None else None
        data["excluded_chip_types"] = list(self.excluded_chip_types)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        if values.get("chip_types") is not None:
            values["chip_types"] = tuple(values["chip_types"])
        values["excluded_chip_types"] = tuple(values.get("excluded_chip_types") or ())
        return cls(**values)

    @classmethod
    def of_job(cls, job, excluded_chip_types: Collection[str] = ()) -> JobSpec:
        """A job's spec for (re-)planning: a job moving on keeps its global batch, and its chip types if pinned;
        `excluded_chip_types` are those it no longer rents (its bid for them cancelled)."""
        spec = cls(
            **{name: getattr(job, name) for name in JOB_COLUMNS}, excluded_chip_types=tuple(sorted(excluded_chip_types))
        )
        plan = job.plan
        resuming = bool(plan and job.latest_checkpoint)
        # Epochs were counted in the launch's global batch: every plan keeps it, so the steps stay the epochs.
        counted = job.quote.global_batch if job.n_epochs and job.quote else None
        return spec.pinned(
            global_batch=plan.global_batch if resuming else counted,
            chip_types=tuple(sorted(plan.chip_types())) if plan and not job.allow_other_chips else None,
        )


def start_step_of(checkpoint_key: str | None) -> int:
    """The step of a checkpoint tree's key (checkpoints/job-<id>/step-<n>): 0 for none or another key."""
    step = (checkpoint_key or "").rstrip("/").rsplit("/", 1)[-1].removeprefix("step-")
    return int(step) if step.isascii() and step.isdigit() else 0
