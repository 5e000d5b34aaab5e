"""How long and how a job trains, as `quote` and `run` options: `--max-steps` or `--epochs`, and the
hyperparameters (`--learning-rate`, `--lr-scheduler`, `--warmup-ratio`/`--warmup-steps`, `--weight-decay`,
`--max-grad-norm`, `--seed`, `--train-on-inputs`). What is left out takes the platform's default."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer

from starverse.objects import Hyperparameters

DEFAULT_STEPS = 200
PANEL = "Training"


class Scheduler(StrEnum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


def option(*names: str, help: str) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=PANEL)


MaxSteps = Annotated[int | None, option("--max-steps", help=f"Training steps (default {DEFAULT_STEPS}; or --epochs).")]
Epochs = Annotated[
    float | None,
    option("--epochs", help="Or passes over your dataset (upload:<id>); the quote's steps say how many steps."),
]
LearningRate = Annotated[float | None, option("--learning-rate", help="Peak learning rate.")]
LRSchedulerOption = Annotated[
    Scheduler | None, option("--lr-scheduler", help="After warm-up: stay at the peak, or decay (default cosine).")
]
WarmupRatio = Annotated[float | None, option("--warmup-ratio", help="Warm-up as a share of the steps (0-0.5).")]
WarmupSteps = Annotated[int | None, option("--warmup-steps", help="Or warm-up in steps.")]
WeightDecay = Annotated[float | None, option("--weight-decay", help="AdamW's decoupled weight decay.")]
MaxGradNorm = Annotated[float | None, option("--max-grad-norm", help="Clip the gradient's global norm (0: never).")]
Seed = Annotated[int | None, option("--seed", help="Initial weights, data order, dropout (default: the job's id).")]
TrainOnInputs = Annotated[
    bool | None,
    option("--train-on-inputs/--no-train-on-inputs", help="Chat and prompt data: the loss counts the prompts too."),
]


OPTIONS: dict[str, Any] = {
    "max_steps": MaxSteps,
    "epochs": Epochs,
    "learning_rate": LearningRate,
    "lr_scheduler": LRSchedulerOption,
    "warmup_ratio": WarmupRatio,
    "warmup_steps": WarmupSteps,
    "weight_decay": WeightDecay,
    "max_grad_norm": MaxGradNorm,
    "seed": Seed,
    "train_on_inputs": TrainOnInputs,
}


def training_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the options above in place of its `training` parameter, which then receives the spec's
    fields they make: `max_steps` or `n_epochs`, and `hyperparameters` when any is given."""
    signature = inspect.signature(command, eval_str=True)
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
             for name, kind in OPTIONS.items()]  # fmt: skip
    parameters = []
    for parameter in signature.parameters.values():
        parameters += added if parameter.name == "training" else [parameter.replace(kind=parameter.KEYWORD_ONLY)]

    @functools.wraps(command)
    def with_training(**kwargs: Any) -> Any:
        chosen = {name: kwargs.pop(name) for name in OPTIONS}
        max_steps, epochs = chosen.pop("max_steps"), chosen.pop("epochs")
        return command(**kwargs, training={**length(max_steps, epochs), **hyperparameters(**chosen)})

    with_training.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return with_training


def length(max_steps: int | None, epochs: float | None) -> dict[str, Any]:
    """`max_steps` or `n_epochs` for the spec (the API takes one of them)."""
    if max_steps is not None and epochs is not None:
        raise typer.BadParameter("give --max-steps or --epochs, not both.", param_hint="--epochs")
    return {"n_epochs": epochs} if epochs is not None else {"max_steps": max_steps or DEFAULT_STEPS}


def hyperparameters(
    learning_rate: float | None = None,
    lr_scheduler: Scheduler | None = None,
    warmup_ratio: float | None = None,
    warmup_steps: int | None = None,
    weight_decay: float | None = None,
    max_grad_norm: float | None = None,
    seed: int | None = None,
    train_on_inputs: bool | None = None,
) -> dict[str, Any]:
    """The spec's `hyperparameters` from the options given ({} for none); the API checks the values and names a bad
    one (`hyperparameters.learning_rate`)."""
    chosen = Hyperparameters(
        learning_rate=learning_rate,
        lr_scheduler=lr_scheduler.value if lr_scheduler else None,
        warmup_ratio=warmup_ratio,
        warmup_steps=warmup_steps,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
        seed=seed,
        train_on_inputs=train_on_inputs,
    )
    settings = chosen.to_api()
    return {"hyperparameters": settings} if settings else {}
