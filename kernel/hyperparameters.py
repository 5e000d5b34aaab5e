"""A job's optimisation settings: what a user may set, the defaults, and the learning-rate schedule.

No Django and no torch here: the API validates what a user sends (workers/api/hyperparameters.py),
the platform fills the defaults with `resolve` (they hang on the training mode and on where the
weights come from), and every rank computes its rate with `learning_rate_at`, a pure function of
the step, so a resumed or moved run follows the same curve as one that never stopped
(docs/FINE_TUNING.md says why each default is what it is).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

CONSTANT, LINEAR, COSINE = "constant", "linear", "cosine"
SCHEDULERS = (CONSTANT, LINEAR, COSINE)

# Where the weights come from: built from a config (the catalog's models) or a pretrained model's.
SCRATCH, PRETRAINED = "scratch", "pretrained"


@dataclass(frozen=True)
class Hyperparameters:
    """What a rank's optimizer and schedule need; None: the default for the job (see `resolve`)."""

    learning_rate: float | None = None  # the peak rate, reached after warm-up
    lr_scheduler: str = COSINE
    warmup_ratio: float | None = None  # a share of the run's steps; or
    warmup_steps: int | None = None  # a number of steps (not both)
    min_lr_ratio: float = 0.1  # linear and cosine decay to this share of the peak rate
    weight_decay: float | None = None
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0  # clip the global gradient norm to this (0: no clipping)
    train_on_inputs: bool = False  # chat and prompt data: the loss counts the prompt's tokens too
    checkpoint_every: int | None = None  # steps; None: the platform's interval for the run's length and risk
    seed: int | None = None  # initial weights, data order and dropout; None: the job's number

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping | None) -> Hyperparameters:
        """From a stored, launched or validated dict; nulls and keys this version doesn't know are left out."""
        known = {item.name for item in fields(cls)}
        return cls(**{key: value for key, value in (data or {}).items() if key in known and value is not None})

    def warmup_for(self, total_steps: int) -> int:
        if self.warmup_steps is not None:
            return min(self.warmup_steps, total_steps)
        return math.ceil((self.warmup_ratio or 0.0) * total_steps)


# Per mode and origin: (peak learning rate, weight decay, warm-up share). docs/FINE_TUNING.md gives the sources.
LORA_DEFAULTS = (2e-4, 0.0, 0.03)
FULL_PRETRAINED_DEFAULTS = (2e-5, 0.0, 0.03)
SCRATCH_WEIGHT_DECAY, SCRATCH_WARMUP = 0.1, 0.01
# From scratch the rate falls with the model's size (the GPT-3 paper's table, 3e-3 for the smallest models).
SCRATCH_RATES = ((50e6, 3e-3), (200e6, 6e-4), (1e9, 3e-4), (10e9, 1.5e-4))
SCRATCH_LARGEST_RATE = 1e-4


def defaults(mode: str, origin: str, parameters: int) -> tuple[float, float, float]:
    """(learning rate, weight decay, warm-up ratio) for a job trained this way."""
    if mode == "lora":
        return LORA_DEFAULTS
    if origin == PRETRAINED:
        return FULL_PRETRAINED_DEFAULTS
    rate = next((rate for size, rate in SCRATCH_RATES if parameters <= size), SCRATCH_LARGEST_RATE)
    return rate, SCRATCH_WEIGHT_DECAY, SCRATCH_WARMUP


def resolve(hyperparameters: Hyperparameters, mode: str, origin: str, parameters: int) -> Hyperparameters:
    """Every None filled with the job's default: what the ranks run with, as the job page shows it."""
    rate, decay, warmup = defaults(mode, origin, parameters)
    no_warmup_given = hyperparameters.warmup_steps is None and hyperparameters.warmup_ratio is None
    return replace(
        hyperparameters,
        learning_rate=hyperparameters.learning_rate if hyperparameters.learning_rate is not None else rate,
        weight_decay=hyperparameters.weight_decay if hyperparameters.weight_decay is not None else decay,
        warmup_ratio=warmup if no_warmup_given else hyperparameters.warmup_ratio,
    )


def learning_rate_at(hyperparameters: Hyperparameters, step: int, total_steps: int) -> float:
    """The rate of the optimizer step that takes the run from `step` to `step + 1` (steps count from 0).

    Warm-up rises linearly to the peak over its steps (the first step already trains, at peak/warmup);
    then `constant` stays at the peak, `linear` and `cosine` fall to min_lr_ratio x peak at the last step.
    """
    peak = float(hyperparameters.learning_rate or 0.0)
    warmup = hyperparameters.warmup_for(total_steps)
    if step < warmup:
        return peak * (step + 1) / warmup
    if hyperparameters.lr_scheduler == CONSTANT:
        return peak
    floor = hyperparameters.min_lr_ratio
    decay_steps = max(total_steps - warmup - 1, 1)
    progress = min(max(step - warmup, 0) / decay_steps, 1.0)
    share = 1.0 - progress if hyperparameters.lr_scheduler == LINEAR else 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (floor + (1.0 - floor) * share)


def steps_for_epochs(n_epochs: float, tokens: int, seq_len: int, global_batch: int) -> int:
    """Steps that pass over `tokens` of packed data `n_epochs` times, `global_batch` windows a step.

    The runtime packs the records into one stream cut into windows of seq_len + 1 tokens that overlap
    by one (hosts/runtime/records.py): ceil((tokens - 1) / seq_len) windows an epoch.
    """
    windows = max(1, math.ceil((max(tokens, 2) - 1) / seq_len))
    return max(1, math.ceil(n_epochs * windows / global_batch))
