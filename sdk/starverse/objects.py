"""Typed answers of the API: a job's hyperparameters (also what a job or quote sends), datasets, checkpoints,
events and jobs, as dataclasses.

Each answer object keeps the API's JSON in `raw` and reads like it too (`checkpoint["step"]`, `.get`, `.keys`),
so code written against the dicts goes on working; fields the SDK does not know yet stay in `raw`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar, Literal, TypeVar

from starverse.plans import Plan

LRScheduler = Literal["constant", "linear", "cosine"]
T = TypeVar("T", bound="APIFields")


@dataclass
class Hyperparameters:
    """How the optimizer steps (`POST /api/v1/jobs/`'s `hyperparameters`); what is None takes the job's default.

    `learning_rate` is the peak; after warm-up (`warmup_ratio` of the steps, or `warmup_steps`, not both)
    `lr_scheduler` stays at it or decays linearly or along a cosine to `min_lr_ratio` x peak. AdamW's
    `weight_decay`, `adam_beta1/2`, `adam_epsilon`; `max_grad_norm` clips (0: never); `train_on_inputs` counts
    the prompts' tokens in the loss; `checkpoint_every` steps; `seed` (default: the job's id).
    """

    learning_rate: float | None = None
    lr_scheduler: LRScheduler | None = None
    warmup_ratio: float | None = None
    warmup_steps: int | None = None
    min_lr_ratio: float | None = None
    weight_decay: float | None = None
    adam_beta1: float | None = None
    adam_beta2: float | None = None
    adam_epsilon: float | None = None
    max_grad_norm: float | None = None
    train_on_inputs: bool | None = None
    checkpoint_every: int | None = None
    seed: int | None = None

    def to_api(self) -> dict[str, Any]:
        """The settings given (None left out): the JSON a job or quote sends."""
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}

    @classmethod
    def from_api(cls, data: Mapping[str, Any] | None) -> Hyperparameters:
        """A job's resolved hyperparameters; settings this SDK does not know are left out."""
        known = {item.name for item in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in (data or {}).items() if key in known})


def hyperparameters_body(value: Hyperparameters | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A `hyperparameters=` argument as the API takes it: a mapping as it is (the API names an unknown key)."""
    if value is None:
        return None
    if isinstance(value, Hyperparameters):
        return value.to_api()
    return dict(value)


def when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def decimal(value: Any) -> Decimal | None:
    return None if value is None or value == "" else Decimal(str(value))


class APIFields(Mapping[str, Any]):
    """How a dataclass reads an answer of the API: typed fields converted from the JSON, which stays in `raw`
    (read as a mapping). APIObject is a snapshot; a handle that reads itself again (a Deployment) uses it too."""

    raw: dict[str, Any]
    # field name -> how to read it from the JSON (default: as it is)
    converters: ClassVar[dict[str, Any]] = {}

    @classmethod
    def fields_of(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """The dataclass's fields that the JSON holds, converted."""
        values = {}
        for item in dataclasses.fields(cls):  # type: ignore[arg-type]
            if item.name == "raw" or item.name not in data or not item.init:
                continue
            convert = cls.converters.get(item.name)
            values[item.name] = convert(data[item.name]) if convert else data[item.name]
        return values

    @classmethod
    def from_api(cls: type[T], data: Mapping[str, Any], **extra: Any) -> T:
        return cls(**cls.fields_of(data), **extra, raw=dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The API's JSON, as it came."""
        return dict(self.raw)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


@dataclass(frozen=True)
class APIObject(APIFields):
    """An answer of the API: typed fields, and the JSON itself in `raw` (read as a mapping)."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True)
class Dataset(APIObject):
    """An uploaded corpus; a job trains on it as `dataset=reference` (upload:<id>)."""

    id: int = 0
    reference: str = ""
    name: str = ""
    kind: str = ""
    size_bytes: int | None = None
    samples: int | None = None
    created_at: datetime | None = None

    converters: ClassVar[dict[str, Any]] = {"created_at": when}


@dataclass(frozen=True)
class Checkpoint(APIObject):
    """A checkpoint a job keeps, named by its `step`: its losses, size and why pruning keeps it."""

    step: int = 0
    loss: float | None = None
    eval_loss: float | None = None
    created_at: datetime | None = None
    size_bytes: int | None = None
    stopping: bool = False
    kept: str = ""
    kept_because: str = ""
    deletable: bool = True
    download_url: str = ""

    converters: ClassVar[dict[str, Any]] = {"created_at": when}


class Checkpoints(list[Checkpoint]):
    """A job's checkpoints, newest step first, with the platform's `retention` policy."""

    def __init__(self, checkpoints: list[Checkpoint] = (), retention: dict | None = None):  # type: ignore[assignment]
        super().__init__(checkpoints)
        self.retention: dict[str, Any] = retention or {}

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Checkpoints:
        return cls([Checkpoint.from_api(item) for item in data.get("checkpoints") or []], data.get("retention"))

    def to_dict(self) -> dict[str, Any]:
        return {"retention": self.retention, "checkpoints": [item.to_dict() for item in self]}


@dataclass(frozen=True)
class Event(APIObject):
    """Something that happened to a job (placed, moved, checkpoint, tracking...), with its data."""

    id: int = 0
    kind: str = ""
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    epoch: int | None = None
    created_at: datetime | None = None

    converters: ClassVar[dict[str, Any]] = {"created_at": when, "data": lambda value: dict(value or {})}


@dataclass(frozen=True)
class Job(APIObject):
    """A job as the API shows it. `plan` is its Plan (Quote) with `steps`; `hyperparameters` the resolved ones."""

    id: int = 0
    name: str = ""
    status: str = ""
    status_reason: str = ""
    model: str = ""
    dataset: str = ""
    per_device_batch_size: int | None = None
    max_steps: int | None = None
    n_epochs: float | None = None
    policy: str = ""
    max_budget: Decimal | None = None
    total_budget: Decimal | None = None
    chip_counts: dict[str, Any] | None = None
    spot: bool = False
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    tracking: dict[str, Any] = field(default_factory=dict)
    continued_from: int | None = None
    start_checkpoint_step: int | None = None
    step: int = 0
    progress: float | None = None
    loss: float | None = None
    first_loss: float | None = None
    eval_loss: float | None = None
    latest_checkpoint_step: int | None = None
    cost: Decimal = Decimal(0)
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    converters: ClassVar[dict[str, Any]] = {
        "max_budget": decimal,
        "total_budget": decimal,
        "cost": lambda value: decimal(value) or Decimal(0),
        "hyperparameters": Hyperparameters.from_api,
        "tracking": lambda value: dict(value or {}),
        "step": lambda value: value or 0,
        "created_at": when,
        "started_at": when,
        "finished_at": when,
    }

    @property
    def plan(self) -> Plan | None:
        return Plan(self.raw["plan"]) if self.raw.get("plan") else None
