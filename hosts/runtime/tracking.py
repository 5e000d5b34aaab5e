"""Experiment tracking on the rank that logs the run: TensorBoard always, Weights & Biases and MLflow when
the job asks (docs/FINE_TUNING.md, "Tracking").

One rank logs: rank 0 of a one-world run, or rank 0 of island 0 in a run of islands (`logs_run`). It writes
TensorBoard event files into `tensorboard/epoch-<n>/` beside the job's checkpoints: straight into a local
checkpoint folder, or into its run folder and uploaded as a tree (`kernel/storage/trees.py`) to
`<checkpoints>/tensorboard/epoch-<n>` when checkpoints are stored. Writing is cheap: the writer's queue is
flushed (and uploaded) only at checkpoints and at the end.

`launch.tracking` (only the logging rank's launch has one) holds the job's W&B and MLflow settings with the
owner's key or token in the clear: it is never printed, never put in an event, and reaches the libraries
only as an argument (W&B's Settings.api_key) or this process's environment (MLFLOW_TRACKING_TOKEN). wandb and
mlflow are optional imports: one asked for but not installed, or failing to start, is a `tracking` event
(service, error) and a log line, and training goes on without it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kernel.protocol import RankLaunch
from kernel.storage import StorageError, locations
from kernel.storage.base import join

TENSORBOARD = "tensorboard"
FLUSH_SECS = 24 * 3600  # the writer's own timer never fires: `flush` does it at checkpoints and at the end
MLFLOW_BATCH = 200  # metrics buffered before one MLflow request (and at every flush)
INSTALL = "pip install 'starverse-platform[tracking]'"


def logs_run(launch: RankLaunch, rank: int) -> bool:
    """The one rank that logs the run: rank 0, in island 0 when the run has islands."""
    return rank == 0 and int((launch.island or {}).get("index", 0)) == 0


def tensorboard_folder(launch: RankLaunch) -> Path:
    """Where this placement's event files are written on this host."""
    stored = locations.is_stored(launch.checkpoint_dir)
    root = Path(launch.run_dir) if stored else Path(launch.checkpoint_dir)
    return root / TENSORBOARD / f"epoch-{launch.epoch}"


class Tracker:
    """The logging rank's sinks; every call is safe when a sink failed or is off."""

    def __init__(self, launch: RankLaunch, events) -> None:
        self.launch, self.events = launch, events
        self.folder = tensorboard_folder(launch)
        self.sinks: list = []
        self.closed = False
        self._secrets = _secrets(launch.tracking or {})
        self._open("tensorboard", lambda: TensorBoardSink(self.folder))
        config = launch.tracking or {}
        if config.get("wandb"):
            self._open("wandb", lambda: WandbSink(launch, config["wandb"]))
        if config.get("mlflow"):
            self._open("mlflow", lambda: MlflowSink(launch, config["mlflow"]))

    def _open(self, service: str, make) -> None:
        try:
            self.sinks.append(make())
        except ImportError:
            self._failed(service, f"{service} was asked for but is not installed on this host ({INSTALL})")
        except Exception as error:  # a bad key, an unreachable server: the run trains on without it
            self._failed(service, f"{service} could not start: {type(error).__name__}: {error}")

    def _failed(self, service: str, message: str) -> None:
        for secret in self._secrets:
            message = message.replace(secret, "<secret>")
        message = message[:500] + "; training goes on without it"
        self.events.emit("tracking", service=service, error=message)
        print(f"tracking: {message}", file=sys.stderr, flush=True)

    def scalars(self, step: int, values: dict[str, float | None]) -> None:
        values = {name: float(value) for name, value in values.items() if value is not None}
        for sink in list(self.sinks):
            self._call(sink, "scalars", step, values)

    def flush(self) -> None:
        """Write what is queued; stored checkpoints: upload the event files beside them."""
        for sink in list(self.sinks):
            self._call(sink, "flush")
        self._upload()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sink in list(self.sinks):
            self._call(sink, "close")
        self._upload()

    def _call(self, sink, method: str, *args) -> None:
        try:
            getattr(sink, method)(*args)
        except Exception as error:
            self.sinks.remove(sink)
            self._failed(sink.service, f"{sink.service} failed: {type(error).__name__}: {error}")

    def _upload(self) -> None:
        if not locations.is_stored(self.launch.checkpoint_dir) or not self.folder.is_dir():
            return
        from hosts.runtime import staging
        from kernel.storage.trees import upload_tree

        key = join(locations.key_of(self.launch.checkpoint_dir), TENSORBOARD, self.folder.name)
        try:
            upload_tree(staging.host_storage(self.launch).store, key, self.folder, meta={"kind": TENSORBOARD})
        except (StorageError, OSError) as error:
            print(f"tracking: the TensorBoard files could not be stored: {error}", file=sys.stderr, flush=True)


class TensorBoardSink:
    service = "tensorboard"

    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        folder.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(folder), max_queue=100_000, flush_secs=FLUSH_SECS)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """One W&B run per job (`starverse-job-<id>`, resumed after a move), its console capture off."""

    service = "wandb"

    def __init__(self, launch: RankLaunch, config: dict) -> None:
        import wandb

        settings = wandb.Settings(console="off", silent=True, api_key=config.get("api_key") or None)
        self.run = wandb.init(
            project=config["project"],
            entity=config.get("entity") or None,
            mode=config.get("mode") or "online",
            id=f"starverse-job-{launch.job_id}",
            name=f"job-{launch.job_id}",
            resume="allow",
            dir=os.environ.get("WANDB_DIR") or launch.run_dir,
            config={"job_id": launch.job_id, "max_steps": launch.max_steps, **launch.hyperparameters},
            settings=settings,
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def flush(self) -> None:
        pass  # wandb sends in the background

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """One MLflow run per job (tagged starverse.job_id, found again after a move), metrics sent in batches."""

    service = "mlflow"

    def __init__(self, launch: RankLaunch, config: dict) -> None:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        if config.get("token"):
            os.environ["MLFLOW_TRACKING_TOKEN"] = config["token"]  # this process only: never in its launch env
        self.metric = Metric
        self.client = MlflowClient(tracking_uri=config["tracking_uri"])
        name = config.get("experiment") or "starverse"
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tag = f"tags.`starverse.job_id` = '{launch.job_id}'"
        runs = self.client.search_runs([experiment], filter_string=tag, max_results=1)
        if runs:
            self.run_id = runs[0].info.run_id
        else:
            tags = {"starverse.job_id": str(launch.job_id)}
            self.run_id = self.client.create_run(experiment, run_name=f"job-{launch.job_id}", tags=tags).info.run_id
        self.pending: list = []

    def scalars(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        self.pending += [self.metric(name, value, now, step) for name, value in values.items()]
        if len(self.pending) >= MLFLOW_BATCH:
            self.flush()

    def flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MLFLOW_BATCH], self.pending[MLFLOW_BATCH:]
            self.client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self.flush()
        self.client.set_terminated(self.run_id)


def _secrets(config: dict) -> list[str]:
    found = [(config.get("wandb") or {}).get("api_key"), (config.get("mlflow") or {}).get("token")]
    return [secret for secret in found if secret]


def grad_norm(engine) -> float | None:
    """DeepSpeed's global gradient norm of the last step, when it keeps one."""
    getter = getattr(engine, "get_global_grad_norm", None)
    try:
        value = getter() if getter else None
    except Exception:
        return None
    if value is None:
        return None
    return float(value.item() if hasattr(value, "item") else value)
