"""The job page's Recipe card: every optimisation setting the run uses, defaults filled in."""

from __future__ import annotations

from fleet.models import Job
from workers.services.hyperparameters import job_hyperparameters

# (setting, label), in the order the card lists them.
RECIPE_ROWS = (
    ("learning_rate", "Learning rate (peak)"),
    ("lr_scheduler", "Schedule"),
    ("warmup", "Warm-up"),
    ("min_lr_ratio", "Floor (share of the peak)"),
    ("weight_decay", "Weight decay"),
    ("adam", "Adam β1, β2, ε"),
    ("max_grad_norm", "Clip gradients at norm"),
    ("train_on_inputs", "Train on prompts too"),
    ("seed", "Seed"),
    ("checkpoint_every", "Checkpoint every"),
)


def recipe_rows(job: Job) -> list[tuple[str, str]]:
    """(label, value) of each setting as the ranks run with it."""
    settings = job_hyperparameters(job)
    warmup = settings.warmup_for(job.max_steps)
    values = {
        "learning_rate": f"{settings.learning_rate:g}",
        "lr_scheduler": settings.lr_scheduler,
        "warmup": f"{warmup} step{'s' if warmup != 1 else ''}",
        "min_lr_ratio": f"{settings.min_lr_ratio:g}",
        "weight_decay": f"{settings.weight_decay:g}",
        "adam": f"{settings.adam_beta1:g}, {settings.adam_beta2:g}, {settings.adam_epsilon:g}",
        "max_grad_norm": f"{settings.max_grad_norm:g}" if settings.max_grad_norm else "never",
        "train_on_inputs": "yes" if settings.train_on_inputs else "no",
        "seed": str(job.pk if settings.seed is None else settings.seed),
        "checkpoint_every": f"{settings.checkpoint_every} steps"
        if settings.checkpoint_every
        else "the platform's interval",
    }
    rows = [(label, values[key]) for key, label in RECIPE_ROWS]
    if job.n_epochs:
        rows.insert(0, ("Epochs", f"{job.n_epochs:g} ({job.max_steps:,} steps)"))
    return rows
