"""The article's API: accelerate() gets a quote, Trainer.fit() runs the job and follows it to the end.

    cluster = starverse.accelerate(model_id="llama-tiny", policy="cost-performance", max_budget=28)
    print(cluster.plan)
    with cluster.mixed_mesh():
        model = starverse.MetaParallel(starverse.ModelConfig.from_pretrained("llama-tiny"))
    run = starverse.Trainer(cluster).fit(model, dataset="synthetic", per_device_batch_size=4, max_steps=200)

Training happens on the platform, not in this process: `MetaParallel` describes the model to
shard across the cluster's mixed chips, and `fit` submits it as a job.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from starverse.amounts import cents
from starverse.client import Client, new_key
from starverse.errors import StarverseError
from starverse.objects import Checkpoints, Event, Hyperparameters, Job, hyperparameters_body

# Plan and its helpers lived here; they are still importable from here.
from starverse.plans import Plan, chip_total, describe_chips, describe_islands, format_duration  # noqa: F401

FINISHED = {"succeeded", "failed", "cancelled", "stopped_no_credit"}
QUOTE_DEFAULTS = {"per_device_batch_size": 4, "max_steps": 1000}
_current_cluster: list[Cluster] = []


@dataclass
class ModelConfig:
    """A model by the name a job's `model` takes: llama-tiny, llama-2-7b, llama-2-13b, llama-2-70b, model:<id>
    (one of your uploads) or a Hugging Face Hub id the platform's Hugging Face cache holds."""

    name: str

    @classmethod
    def from_pretrained(cls, name: str, *, client: Client | None = None) -> ModelConfig:
        """The model a job will train, by name; nothing is downloaded, here or on the platform.

        - A built-in model (llama-tiny, llama-2-7b, llama-2-13b, llama-2-70b) or one of your uploads,
          "model:<id>" (what `Client.upload_model` and `starverse model upload DIR` answer), is taken as it is.
        - A Hugging Face Hub id ("org/name") trains only if the platform's Hugging Face cache holds it.
          With a client at hand (`client=`, or the cluster of an enclosing `cluster.mixed_mesh()`), the
          platform is asked now (GET /api/v1/models/?name=...) and a ValidationError says what to do
          (upload the folder and use its model:<id>); without one, the platform's 400 when the job is
          quoted does. A Hub id is never swapped for a built-in model of the same architecture.
        """
        client = client or (_current_cluster[-1].client if _current_cluster else None)
        if client is not None and is_hub_id(name):
            client.find_model(name)
        return cls(name=name)


def is_hub_id(name: str) -> bool:
    """Whether a model name is a Hugging Face Hub id (org/name) rather than a platform name."""
    return "/" in name and not name.startswith("model:")


@dataclass
class MetaParallel:
    """A model to shard across the mixed chips of a cluster (built on the platform, not here)."""

    config: ModelConfig
    cluster: Cluster | None = field(default=None)

    def __post_init__(self) -> None:
        if self.cluster is None and _current_cluster:
            self.cluster = _current_cluster[-1]

    @property
    def name(self) -> str:
        return self.config.name


@dataclass
class Cluster:
    """Chips at a policy and an hourly budget, as quoted now; `fit` re-quotes for the model it trains."""

    client: Client
    model_id: str
    policy: str
    max_budget: Decimal
    options: dict
    plan: Plan

    @contextlib.contextmanager
    def mixed_mesh(self) -> Iterator[Cluster]:
        """Models made inside this block are sharded across this cluster."""
        _current_cluster.append(self)
        try:
            yield self
        finally:
            _current_cluster.remove(self)

    def spec(self, model: str, **fields) -> dict:
        spec = {"model": model, "policy": self.policy, "max_budget": str(self.max_budget), **self.options}
        spec.update({key: value for key, value in fields.items() if value is not None})
        return spec


def accelerate(
    model_id: str,
    policy: str = "cost-performance",
    max_budget: float | str | Decimal = 28,
    *,
    client: Client | None = None,
    **options,
) -> Cluster:
    """Quote the cheapest good mix of chips for a model within `max_budget` per hour.

    Options go into the job spec as they are: total_budget, chip_counts, spot, bid, allow_on_demand,
    allow_other_chips, hyperparameters (a starverse.Hyperparameters or a mapping), dataset and n_epochs
    (the plan's `steps` then say how many steps that is). Raises BudgetTooLow, NoCapacity, ModelDoesNotFit,
    AuthError, ValidationError (its `field` names a bad option) or ConfigError.
    """
    client = client or Client()
    budget = Decimal(str(max_budget))
    options = {key: str(value) if isinstance(value, Decimal) else value for key, value in options.items()}
    if options.get("hyperparameters") is not None:
        options["hyperparameters"] = hyperparameters_body(options["hyperparameters"])
    cluster = Cluster(client, model_id, policy, budget, options, Plan({}))
    defaults = {
        key: value for key, value in QUOTE_DEFAULTS.items() if not (key == "max_steps" and "n_epochs" in options)
    }
    cluster.plan = Plan(client.quote(cluster.spec(model_id, **defaults)))
    return cluster


@dataclass
class Run:
    """A job on the platform; `refresh()` reads it again."""

    client: Client
    data: dict

    id = property(lambda self: self.data["id"])
    status = property(lambda self: self.data["status"])
    step = property(lambda self: self.data.get("step") or 0)
    max_steps = property(lambda self: self.data.get("max_steps") or 0)
    loss = property(lambda self: self.data.get("loss"))
    first_loss = property(lambda self: self.data.get("first_loss"))
    status_reason = property(lambda self: self.data.get("status_reason") or "")
    migrations = property(lambda self: list(self.data.get("migrations") or []))
    plan = property(lambda self: Plan(self.data["plan"]) if self.data.get("plan") else None)
    n_epochs = property(lambda self: self.data.get("n_epochs"))

    @property
    def job(self) -> Job:
        """The job as a typed object (as last read)."""
        return Job.from_api(self.data)

    @property
    def hyperparameters(self) -> Hyperparameters:
        """The hyperparameters the job trains with, defaults resolved."""
        return Hyperparameters.from_api(self.data.get("hyperparameters"))

    @property
    def cost(self) -> Decimal:
        return Decimal(str(self.data.get("cost") or "0"))

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def refresh(self) -> Run:
        self.data = self.client.job(self.id)
        return self

    def cancel(self) -> Run:
        self.data = self.client.cancel_job(self.id)
        return self

    def continue_(self, **options: Any) -> Run:
        """A new run going on from this finished one's checkpoint (`Client.continue_job`'s options)."""
        return Run(self.client, self.client.continue_job(self.id, **options))

    def logs(self, after: int = 0) -> list[dict]:
        return self.client.job_logs(self.id, after=after)

    def events(self) -> list[Event]:
        return self.client.events(self.id)

    def checkpoints(self) -> Checkpoints:
        """Its checkpoints, newest step first (`Client.checkpoints`)."""
        return self.client.checkpoints(self.id)

    def download_model(self, path: str | Path, *, merged: bool = False) -> Path:
        """The trained model, unpacked under `path` in Hugging Face format; returns its folder."""
        return self.client.download_model(self.id, path, merged=merged)

    def download_checkpoint(self, step: int, path: str | Path, *, merged: bool = False) -> Path:
        """One checkpoint as a Hugging Face model, unpacked under `path`; returns its folder."""
        return self.client.download_checkpoint(self.id, step, path, merged=merged)

    def download_tensorboard(self, path: str | Path) -> Path:
        """Its TensorBoard event files under `path`; returns the folder to `tensorboard --logdir`."""
        return self.client.download_tensorboard(self.id, path)

    def wait(self, poll: float = 2.0, on_update: Callable[[Run], None] | None = None) -> Run:
        """Poll until the run ends; transient errors (retried by the client) don't stop the wait."""
        while not self.finished:
            time.sleep(poll)
            self.refresh()
            if on_update:
                on_update(self)
        return self

    def __str__(self) -> str:
        loss = f"{self.loss:.4f}" if isinstance(self.loss, int | float) else "-"
        return f"Run {self.id}: {self.status}, step {self.step}/{self.max_steps}, loss {loss}, cost ¥{cents(self.cost)}"

    __repr__ = __str__


class Trainer:
    """Submits a model to a cluster as a job and follows it."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def fit(
        self,
        model: MetaParallel | ModelConfig | str,
        dataset: str = "synthetic",
        per_device_batch_size: int = 4,
        max_steps: int | None = None,
        *,
        n_epochs: float | None = None,
        hyperparameters: Hyperparameters | dict | None = None,
        name: str = "",
        progress: bool = True,
        follow: bool = True,
        poll: float = 2.0,
        on_interrupt: str = "ask",
        idempotency_key: str | None = None,
    ) -> Run:
        """Submit the job and follow it with a progress bar until it ends; returns the Run.

        It trains `max_steps` (default 1000), or `n_epochs` passes over `dataset` (one of yours, upload:<id>),
        with `hyperparameters` (a starverse.Hyperparameters or a mapping) over the cluster's own.
        Retries reuse one Idempotency-Key, so a retried submit never starts two jobs. On Ctrl-C:
        `on_interrupt="ask"` asks whether to cancel the job (when there is a terminal to ask on),
        "cancel" cancels it, "detach" leaves it running; the KeyboardInterrupt is raised again
        unless the job was cancelled.
        """
        model_name = model if isinstance(model, str) else model.name
        epochs = n_epochs if n_epochs is not None else self.cluster.options.get("n_epochs")
        spec = self.cluster.spec(
            model_name,
            dataset=dataset,
            per_device_batch_size=per_device_batch_size,
            max_steps=max_steps if max_steps is not None or epochs is not None else 1000,
            n_epochs=n_epochs,
            hyperparameters=hyperparameters_body(hyperparameters),
            name=name,
        )
        run = Run(self.cluster.client, self.cluster.client.create_job(spec, idempotency_key or new_key()))
        if not follow:
            return run
        try:
            return follow_run(run, poll=poll, progress=progress)
        except KeyboardInterrupt:
            if not should_cancel(run, on_interrupt):
                print(f"\nJob {run.id} keeps running; follow it with `starverse logs -f {run.id}`.", file=sys.stderr)
                raise
            run.cancel()
            print(f"\nCancelling job {run.id}...", file=sys.stderr)
            return run.wait(poll=min(poll, 1.0))


def follow_run(run: Run, poll: float = 2.0, progress: bool = True) -> Run:
    """Poll the run until it ends, with a tqdm bar of steps, loss and cost."""
    if not progress:
        return run.wait(poll)
    from tqdm.auto import tqdm

    with tqdm(total=run.max_steps, desc=f"job {run.id}", unit="step", dynamic_ncols=True) as bar:

        def update(current: Run) -> None:
            bar.n = min(current.step, current.max_steps)
            loss = f"{current.loss:.3f}" if isinstance(current.loss, int | float) else "-"
            bar.set_postfix_str(f"{current.status} loss={loss} cost=¥{current.cost}", refresh=False)
            bar.refresh()

        update(run)
        run.wait(poll, on_update=update)
    return run


def should_cancel(run: Run, on_interrupt: str) -> bool:
    if on_interrupt == "cancel":
        return True
    if on_interrupt != "ask" or not sys.stdin or not sys.stdin.isatty():
        return False
    try:
        answer = input(f"\nCancel job {run.id} on the platform? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in {"y", "yes"}


__all__ = [
    "Cluster",
    "MetaParallel",
    "ModelConfig",
    "Plan",
    "Run",
    "StarverseError",
    "Trainer",
    "accelerate",
    "follow_run",
]
