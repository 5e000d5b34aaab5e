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

FINISHED = {"succeeded", "failed", "cancelled", "stopped_no_credit"}
QUOTE_DEFAULTS = {"per_device_batch_size": 4, "max_steps": 1000}
_current_cluster: list[Cluster] = []


@dataclass
class Plan:
    """A quote: which chips, how fast, what it costs. `print(plan)` shows it as a small table."""

    data: dict

    @property
    def chip_counts(self) -> dict[str, int]:
        """Chips per type, on-demand and spot together."""
        return {chip: chip_total(modes) for chip, modes in (self.data.get("chip_counts") or {}).items()}

    @property
    def tokens_per_s(self) -> float:
        return float(self.data.get("tokens_per_s") or 0)

    @property
    def price_per_hour(self) -> Decimal:
        return Decimal(self.data.get("price_per_hour") or "0")

    @property
    def eta_seconds(self) -> float:
        return float(self.data.get("eta_seconds") or 0)

    @property
    def total_cost(self) -> Decimal:
        return Decimal(self.data.get("total_cost") or "0")

    @property
    def islands(self) -> list[dict]:
        """The plan's islands: the ranks of one software stack each ({"index", "stack", "simulated",
        "chips", "ranks", "batch", "tokens_per_s"}); one island when every chip is of one stack."""
        return list(self.data.get("islands") or [])

    @property
    def sync(self) -> dict | None:
        """How several islands keep in step: {"mode": "step" | "diloco", "sync_every", "bridge_gbps",
        "bridge_source" ("measured" | "declared" | "default"), "bytes_per_step", "seconds_per_sync", "exact"};
        None for one island."""
        return self.data.get("sync")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __str__(self) -> str:
        chips = ", ".join(describe_chips(self.data.get("chip_counts") or {})) or "none"
        lines = [
            f"Plan for {self.data.get('model')} ({self.data.get('policy')})",
            f"  chips       {chips}",
            f"  throughput  {self.tokens_per_s:,.0f} tokens/s",
            f"  price       ¥{cents(self.price_per_hour)}/h",
            f"  ETA         {format_duration(self.eta_seconds)} for {self.data.get('tokens_per_step', 0):,} "
            "tokens/step",
            f"  total       ¥{cents(self.total_cost)}",
        ]
        if self.sync:
            lines.insert(2, f"  islands     {describe_islands(self.islands, self.sync)}")
        baseline = self.data.get("baseline")
        if baseline and self.data.get("speedup_vs_baseline"):
            best = ", ".join(describe_chips(baseline.get("chip_counts") or {}))
            lines.append(
                f"  vs {best}: {self.data['speedup_vs_baseline']:.2f}× the speed, "
                f"{self.data.get('cost_ratio_vs_baseline') or 0:.2f}× the cost"
            )
        return "\n".join(lines)

    __repr__ = __str__


def describe_islands(islands: list[dict], sync: dict) -> str:
    """ "3 (cuda-simulated, xla-simulated, cann-simulated), diloco, synced every 40 steps: close to one world,
    not exactly it; bridge 1.0 Gbit/s (default)" """
    names = ", ".join(str(island.get("island") or island.get("stack")) for island in islands)
    if sync.get("mode") == "step":
        how = "gradients synced every step: exactly one world"
    else:
        how = f"diloco, synced every {sync.get('sync_every')} steps: close to one world, not exactly it"
    source = f" ({sync['bridge_source']})" if sync.get("bridge_source") else ""
    return f"{len(islands)} ({names}), {how}; bridge {sync.get('bridge_gbps')} Gbit/s{source}"


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
    allow_other_chips. Raises BudgetTooLow, NoCapacity, ModelDoesNotFit, AuthError or ConfigError.
    """
    client = client or Client()
    budget = Decimal(str(max_budget))
    options = {key: str(value) if isinstance(value, Decimal) else value for key, value in options.items()}
    cluster = Cluster(client, model_id, policy, budget, options, Plan({}))
    cluster.plan = Plan(client.quote(cluster.spec(model_id, **QUOTE_DEFAULTS)))
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

    def download_model(self, path: str | Path, *, merged: bool = False) -> Path:
        """The trained model, unpacked under `path` in Hugging Face format; returns its folder."""
        return self.client.download_model(self.id, path, merged=merged)

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
        max_steps: int = 1000,
        *,
        name: str = "",
        progress: bool = True,
        follow: bool = True,
        poll: float = 2.0,
        on_interrupt: str = "ask",
        idempotency_key: str | None = None,
    ) -> Run:
        """Submit the job and follow it with a progress bar until it ends; returns the Run.

        Retries reuse one Idempotency-Key, so a retried submit never starts two jobs. On Ctrl-C:
        `on_interrupt="ask"` asks whether to cancel the job (when there is a terminal to ask on),
        "cancel" cancels it, "detach" leaves it running; the KeyboardInterrupt is raised again
        unless the job was cancelled.
        """
        model_name = model if isinstance(model, str) else model.name
        spec = self.cluster.spec(
            model_name,
            dataset=dataset,
            per_device_batch_size=per_device_batch_size,
            max_steps=max_steps,
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


def chip_total(modes: dict | int) -> int:
    """A plan counts chips per type and mode ({"rtx-4090": {"on_demand": 1, "spot": 2}})."""
    return sum(modes.values()) if isinstance(modes, dict) else int(modes)


def describe_chips(chip_counts: dict) -> list[str]:
    described = []
    for chip, modes in chip_counts.items():
        if isinstance(modes, dict):
            described += [f"{count}× {chip}" + (" (spot)" if mode == "spot" else "") for mode, count in modes.items()]
        else:
            described.append(f"{modes}× {chip}")
    return described


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


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
