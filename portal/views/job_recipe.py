"""The job page's Recipe card: every optimisation setting the run uses, defaults filled in."""

from __future__ import annotations

from django.utils.translation import gettext, gettext_lazy, ngettext

from fleet.models import Job
from workers.services.hyperparameters import job_hyperparameters

# (setting, label), in the order the card lists them.
RECIPE_ROWS = (
    ("learning_rate", gettext_lazy("Learning rate (peak)")),
    ("lr_scheduler", gettext_lazy("Schedule")),
    ("warmup", gettext_lazy("Warm-up")),
    ("min_lr_ratio", gettext_lazy("Floor (share of the peak)")),
    ("weight_decay", gettext_lazy("Weight decay")),
    ("adam", gettext_lazy("Adam β1, β2, ε")),
    ("max_grad_norm", gettext_lazy("Clip gradients at norm")),
    ("train_on_inputs", gettext_lazy("Train on prompts too")),
    ("seed", gettext_lazy("Seed")),
    ("checkpoint_every", gettext_lazy("Checkpoint every")),
)
SCHEDULES = {"cosine": gettext_lazy("cosine"), "constant": gettext_lazy("constant"), "linear": gettext_lazy("linear")}


def recipe_rows(job: Job) -> list[tuple[str, str]]:
    """(label, value) of each setting as the ranks run with it."""
    settings = job_hyperparameters(job)
    warmup = settings.warmup_for(job.max_steps)
    values = {
        "learning_rate": f"{settings.learning_rate:g}",
        "lr_scheduler": SCHEDULES.get(settings.lr_scheduler, settings.lr_scheduler),
        "warmup": ngettext("%(count)s step", "%(count)s steps", warmup) % {"count": warmup},
        "min_lr_ratio": f"{settings.min_lr_ratio:g}",
        "weight_decay": f"{settings.weight_decay:g}",
        "adam": f"{settings.adam_beta1:g}, {settings.adam_beta2:g}, {settings.adam_epsilon:g}",
        "max_grad_norm": f"{settings.max_grad_norm:g}" if settings.max_grad_norm else gettext("never"),
        "train_on_inputs": gettext("yes") if settings.train_on_inputs else gettext("no"),
        "seed": str(job.pk if settings.seed is None else settings.seed),
        "checkpoint_every": gettext("%(count)s steps") % {"count": settings.checkpoint_every}
        if settings.checkpoint_every
        else gettext("the platform's interval"),
    }
    rows = [(label, values[key]) for key, label in RECIPE_ROWS]
    if job.n_epochs:
        rows.insert(
            0,
            (
                gettext("Epochs"),
                gettext("%(epochs)s (%(steps)s steps)")
                % {"epochs": f"{job.n_epochs:g}", "steps": f"{job.max_steps:,}"},
            ),
        )
    return rows
