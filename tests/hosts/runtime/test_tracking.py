"""Tracking on a real run (hosts/runtime/tracking.py): rank 0 writes TensorBoard event files with the loss,
rate and tokens/s, and logs the same to W&B (offline) and MLflow (a local file store) when the job asks.

One short llama-tiny job of two ranks serves every test here; wandb and mlflow are in the test extra.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import wandb_files
from tests.support.ranks import run_job

STEPS = 4
TRAIN = ("train/loss", "train/lr", "train/tokens_per_s")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    wandb_dir = root / "wandb-dir"
    wandb_dir.mkdir()
    tracking = {
        "wandb": {"project": "starverse-test", "mode": "offline", "api_key": "wandb-key-not-to-show-0123456789"},
        "mlflow": {"tracking_uri": f"file:{root / 'mlruns'}", "experiment": "tiny", "token": "mlflow-token-hidden"},
    }
    with pytest.MonkeyPatch.context() as patch:  # the ranks inherit this environment
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_DIR", str(wandb_dir))
        patch.setenv("WANDB_SILENT", "true")
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps `file:` stores behind this switch
        job = run_job(root / "job", [1, 2], max_steps=STEPS, job_id=7, tracking=tracking)
    return root, job, tracking


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_rank_0_writes_tensorboard_event_files_beside_the_checkpoints(tracked):
    root, job, _ = tracked
    folder = root / "job" / "checkpoints" / "tensorboard" / "epoch-1"
    assert list(folder.glob("events.out.tfevents.*"))
    found = scalars(folder)
    assert set(TRAIN) <= set(found)
    assert all([step for step, _ in found[tag]] == list(range(1, STEPS + 1)) for tag in TRAIN)
    losses = {e["step"]: e["loss"] for e in job.events(0) if e["event"] == "metric"}
    assert [value for _, value in found["train/loss"]] == pytest.approx([losses[s] for s in range(1, STEPS + 1)])
    assert all(value > 0 for _, value in found["train/lr"] + found["train/tokens_per_s"])


def test_the_secrets_are_never_printed_or_reported(tracked):
    _, job, tracking = tracked
    for index in range(2):
        said = Path(job.stdout_path(index)).read_text() + Path(job.stderr_path(index)).read_text()
        assert tracking["wandb"]["api_key"] not in said and tracking["mlflow"]["token"] not in said
    assert not [e for e in job.events(0) if e["event"] == "tracking"], job.events(0)  # both started


def test_wandb_offline_keeps_the_run_with_its_metrics(tracked):
    root, _, _ = tracked
    runs = list((root / "wandb-dir" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    history = wandb_files.history(next(runs[0].glob("run-*.wandb")))
    logged = [row for row in history if "train/loss" in row]
    assert len(logged) == STEPS
    assert all(set(TRAIN) <= set(row) for row in logged)
    assert [row["_step"] for row in logged] == list(range(1, STEPS + 1))


def test_mlflow_records_the_metrics_in_its_store(tracked, monkeypatch):
    root, _, _ = tracked
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{root / 'mlruns'}")
    experiment = client.get_experiment_by_name("tiny")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["starverse.job_id"] == "7"
    for tag in TRAIN:
        assert [m.step for m in client.get_metric_history(run.info.run_id, tag)] == list(range(1, STEPS + 1))


def test_a_tracker_asked_for_but_not_installed_is_an_event_and_training_goes_on(tmp_path, monkeypatch):
    import builtins

    from hosts.runtime.tracking import Tracker
    from kernel.protocol import RankLaunch

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    emitted = []

    class Events:
        def emit(self, event, **fields):
            emitted.append((event, fields))

    launch = RankLaunch(
        job_id=1, epoch=1, rank=0, world_size=1, master_addr="", master_port=0, model={}, dataset="synthetic",
        micro_batches=[1], max_steps=1, zero_stage=0, run_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "c"),
        tracking={"wandb": {"project": "p", "api_key": "secret-key-123"}},
    )  # fmt: skip
    tracker = Tracker(launch, Events())
    tracker.scalars(1, {"train/loss": 2.0})
    tracker.close()
    assert [(event, fields["service"]) for event, fields in emitted] == [("tracking", "wandb")]
    assert "not installed" in emitted[0][1]["error"] and "secret-key-123" not in emitted[0][1]["error"]
    assert list((tmp_path / "c" / "tensorboard" / "epoch-1").glob("events.out.tfevents.*"))


def test_with_stored_checkpoints_the_event_files_are_stored_as_a_tree_beside_them(tmp_path, monkeypatch):
    from hosts.runtime import staging
    from hosts.runtime.tracking import Tracker
    from kernel.protocol import RankLaunch
    from kernel.storage import store_from_environment
    from kernel.storage.trees import read_manifest

    monkeypatch.setenv("STORAGE_URL", f"file://{tmp_path / 'store'}")
    staging.storage_for_grant.cache_clear()
    launch = RankLaunch(
        job_id=5, epoch=3, rank=0, world_size=1, master_addr="", master_port=0, model={}, dataset="synthetic",
        micro_batches=[1], max_steps=2, zero_stage=0, run_dir=str(tmp_path / "run"),
        checkpoint_dir="store:checkpoints/job-5",
    )  # fmt: skip
    tracker = Tracker(launch, events=None)
    tracker.scalars(1, {"train/loss": 3.0, "train/grad_norm": None})
    tracker.flush()
    manifest = read_manifest(store_from_environment(), "checkpoints/job-5/tensorboard/epoch-3")
    assert manifest and all(name.startswith("events.out.tfevents.") for name in manifest.files)
    tracker.scalars(2, {"train/loss": 2.5})
    tracker.close()
    stored = read_manifest(store_from_environment(), "checkpoints/job-5/tensorboard/epoch-3")
    assert stored.size > manifest.size  # the end's upload carries step 2 too
    staging.storage_for_grant.cache_clear()
