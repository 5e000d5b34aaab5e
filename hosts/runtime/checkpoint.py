"""Checkpoints that a job can resume from on another mix of chips.

Layout of `checkpoint_dir`:

    latest                  "step-<n>" of the newest complete checkpoint, replaced last
    step-<n>/
      meta.json             step, samples consumed (the data position), the rate schedule, topology, model, dataset
      ds/                   DeepSpeed's own checkpoint (tag "ds": model states + ZeRO shards)
      rng-<rank>.pt         each rank's RNG states
      universal/            added on demand: the topology-free form (see `universal.py`)
      model/, adapter/      the weights the user takes home, in Hugging Face format (`export.py`):
                            every checkpoint holds its own (model/ of a full fine-tune, adapter/
                            of a LoRA job); final and stop ones add a LoRA job's merged model/

A LoRA job's DeepSpeed checkpoint holds only the adapter and its optimizer state: the frozen base
weights come from the model's own files on every start.

Every rank writes into `.tmp-step-<n>-e<epoch>/`; after a barrier rank 0 writes meta.json,
fsyncs, renames the directory into place and only then moves `latest`, so a reader never sees
half a checkpoint, and a crash mid-save leaves the previous one current.

Stored checkpoints (`checkpoint_dir` is `store:<key>`, hosts share no disk): each rank writes into
its own host's run folder; one rank per host (LOCAL_RANK 0) uploads what that host's ranks wrote to
`<key>/step-<n>/`; rank 0 gathers every host's file list, uploads meta.json (and the exported model)
and writes the tree's manifest last (`kernel/storage/trees.py`): a crash mid-upload leaves no
checkpoint anyone could resume from. A resume stages only what its ranks load: meta.json, this rank's
RNG file and either DeepSpeed's `ds/` (same topology) or the `universal/` tree, which the first
resume on another topology converts once (rank 0) and stores beside the checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from hosts.runtime import export as hf_export
from hosts.runtime import staging, universal
from hosts.runtime.engine import Placement, hyperparameters_of
from hosts.runtime.hfmodel import ModelSource, spec_from_dict
from kernel.hyperparameters import learning_rate_at
from kernel.modelspecs import ModelSpec
from kernel.protocol import RankLaunch
from kernel.storage import locations
from kernel.storage.base import join
from kernel.storage.trees import local_files, read_manifest, upload_files, upload_tree, write_manifest

FORMAT = "starverse-checkpoint/1"
DS_TAG = "ds"
META = "meta.json"
LATEST = "latest"
NATIVE, UNIVERSAL, UNIVERSAL_PLAIN = "native", "universal", "universal-plain"


@dataclass
class TrainState:
    """Where training stands: steps done, global samples consumed, the last global loss."""

    step: int = 0
    samples_seen: int = 0
    loss: float | None = None
    eval_loss: float | None = None


@dataclass(frozen=True)
class ResumePlan:
    """Which checkpoint to load and how (native when the topology matches, else universal)."""

    step_dir: Path  # local: the checkpoint itself, or (stored) where this host stages its files
    meta: dict
    mode: str
    key: str | None = None  # the stored checkpoint's key, when it is stored
    storage: staging.HostStorage | None = None  # how this rank reaches it, then


def layout(zero_stage: int) -> str:
    """How the optimizer state is stored.

    "plain" without ZeRO: all of it (fp32 masters too, under bf16) in the model-states file;
    "partitioned" under ZeRO 1-2: DeepSpeed shards it per rank.
    """
    return "plain" if zero_stage == 0 else "partitioned"


def save(
    engine, launch: RankLaunch, placement: Placement, state: TrainState, export: bool, *, hf: bool = True
) -> tuple[str, float]:
    """Collective: write step-<state.step> atomically; returns (path or `store:` key, seconds).

    `export`: the whole take-home export (a LoRA job's adapter and merged model). Otherwise `hf` writes the
    checkpoint's own Hugging Face form, so that any checkpoint downloads as a model: a full fine-tune's
    model/ (its fp32 weights: a quarter or less of what the checkpoint's weights and Adam moments take), a
    LoRA job's adapter/ (its trained weights only, no gather of the frozen base)."""
    started = time.perf_counter()
    stored = locations.is_stored(launch.checkpoint_dir)
    root = Path(launch.run_dir) / "checkpoints" if stored else Path(launch.checkpoint_dir)
    final = root / f"step-{state.step}"
    tmp = root / f".tmp-{final.name}-e{launch.epoch}"
    if placement.rank == 0 or (stored and host_leader()):
        root.mkdir(parents=True, exist_ok=True)
        for crashed in root.glob(f".tmp-step-*-e{launch.epoch}"):  # one save at a time: older ones died
            shutil.rmtree(crashed, ignore_errors=True)
    dist.barrier()
    engine.save_checkpoint(
        str(tmp),
        tag=DS_TAG,
        client_state=universal.client_state(),
        save_latest=False,
        exclude_frozen_parameters=True,  # LoRA: the base model is the user's files, never copied
    )
    torch.save(rng_state(placement), tmp / f"rng-{placement.rank}.pt")
    lora = ModelSource.from_launch(launch.model).is_lora
    weights = full_fp32_state_dict(engine, trainable_only=lora and not export) if export or hf else None
    dist.barrier()
    if stored:
        key = join(locations.key_of(launch.checkpoint_dir), final.name)
        _upload(engine, launch, placement, state, (weights, export), tmp, key)
        return locations.stored(key), time.perf_counter() - started
    if placement.rank == 0:
        _finish_locally(engine, launch, placement, state, (weights, export), tmp)
        _fsync_tree(tmp)
        _publish(tmp, final)
        _point_latest(root, final.name)
    return str(final), time.perf_counter() - started


def host_leader() -> bool:
    """The rank that speaks for this host's ranks (uploads what they wrote)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def _finish_locally(engine, launch, placement, state, exported: tuple, folder: Path) -> None:
    """Rank 0: the exported model (when asked: `exported` is (weights or None, merged)) and meta.json into the
    checkpoint folder."""
    spec = spec_from_dict(launch.model)
    weights, merged = exported
    if weights is not None:
        hf_export.export(folder, engine.module, weights, ModelSource.from_launch(launch.model), merged=merged)
    _write_json(folder / META, _meta(launch, placement, spec, state))


def _upload(engine, launch, placement, state, exported: tuple, tmp: Path, key: str) -> None:
    """Collective: each host's leader uploads its files; rank 0 adds meta.json and the export, then the
    manifest over everything, last."""
    storage = staging.host_storage(launch)
    entries = upload_files(storage.store, key, tmp, local_files(tmp)) if host_leader() else {}
    gathered: list[dict | None] = [None] * placement.world_size
    dist.all_gather_object(gathered, entries)
    if placement.rank == 0:
        files = {name: entry for part in gathered for name, entry in (part or {}).items()}
        _finish_locally(engine, launch, placement, state, exported, tmp)
        added = [name for name in local_files(tmp) if name not in files]
        entries = {**entries, **upload_files(storage.store, key, tmp, added)}
        files.update(entries)
        write_manifest(storage.store, key, files, meta={"kind": "checkpoint", "step": state.step})
    if host_leader():
        for name, entry in entries.items():  # a resume on this host then downloads none of it
            storage.cache.adopt(tmp / name, entry)
        shutil.rmtree(tmp, ignore_errors=True)


def plan_resume(launch: RankLaunch, placement: Placement) -> ResumePlan | None:
    """Read the checkpoint's meta and choose the load path (every rank decides alike)."""
    if not launch.resume_from:
        return None
    key = storage = None
    if locations.is_stored(launch.resume_from):
        key, storage = locations.key_of(launch.resume_from), staging.host_storage(launch)
        step_dir = Path(launch.run_dir) / "resume" / key.rsplit("/", 1)[-1]
        _stage(storage, key, step_dir, lambda name: name == META)
    else:
        step_dir = resolve(launch.resume_from)
    meta = json.loads((step_dir / META).read_text())
    if meta.get("model") != spec_from_dict(launch.model).as_dict():
        raise ValueError(f"checkpoint {step_dir} is of model {meta.get('model')}, not {launch.model}")
    target = layout(launch.zero_stage)
    same_dtype = meta["dtype"] == _dtype(placement)
    same_shards = (meta["world_size"], meta["zero_stage"]) == (placement.world_size, launch.zero_stage)
    if meta["layout"] == target and same_dtype and (target == "plain" or same_shards):
        mode = NATIVE
    else:
        mode = UNIVERSAL_PLAIN if target == "plain" else UNIVERSAL
    if key is not None:
        rng = f"rng-{placement.rank}.pt"
        _stage(storage, key, step_dir, lambda name: name == rng or (mode == NATIVE and name.startswith(f"{DS_TAG}/")))
    return ResumePlan(step_dir, meta, mode, key, storage)


def prepare(plan: ResumePlan | None, placement: Placement, workers: int = 1) -> None:
    """Collective: rank 0 converts to the universal form if the plan needs it; all wait.

    A stored checkpoint is converted once, by the first resume that needs it, and the universal tree is
    stored beside it; every host then stages that tree.
    """
    if plan is None or plan.mode == NATIVE:
        return
    stored_universal = join(plan.key, universal.TAG) if plan.key else None
    if placement.rank == 0:
        started = time.perf_counter()
        storage = plan.storage
        if storage is None or read_manifest(storage.store, stored_universal) is None:
            if storage is not None:
                _stage(storage, plan.key, plan.step_dir, lambda name: name.startswith(f"{DS_TAG}/"))
            out = universal.ensure(plan.step_dir, plan.meta["layout"] == "plain", workers)
            if storage is not None:
                manifest = upload_tree(storage.store, stored_universal, out, meta={"kind": "universal"})
                for name, entry in manifest.files.items():
                    storage.cache.adopt(out / name, entry)
            print(
                f"universal checkpoint {out} ready in {time.perf_counter() - started:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    dist.barrier()
    if stored_universal:
        _stage(plan.storage, stored_universal, plan.step_dir / universal.TAG)


def _stage(storage: staging.HostStorage, key: str, dest: Path, select=None) -> None:
    storage.cache.stage_tree(storage.store, key, dest, select)


def load(engine, plan: ResumePlan, placement: Placement, *, lora: bool = False) -> TrainState:
    """Restore weights, optimizer and RNG; returns the state to continue from (step + 1 next)."""
    if plan.mode == UNIVERSAL_PLAIN:
        universal.load_into_plain(engine, plan.step_dir / universal.TAG)
    else:
        tag = DS_TAG if plan.mode == NATIVE else universal.TAG
        path, _ = engine.load_checkpoint(
            str(plan.step_dir), tag=tag, load_lr_scheduler_states=False, load_module_strict=not lora
        )
        if path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint under {plan.step_dir / tag}")
    restore_rng(plan.step_dir / f"rng-{placement.rank}.pt", placement)
    meta = plan.meta
    return TrainState(meta["step"], meta["samples_seen"], meta.get("loss"))


def resolve(path: str | os.PathLike) -> Path:
    """A step directory, given either it or a checkpoint root with a `latest` pointer."""
    path = Path(path)
    if (path / META).is_file():
        return path
    if (path / LATEST).is_file():
        return resolve(path / (path / LATEST).read_text().strip())
    raise FileNotFoundError(f"no checkpoint at {path} (neither {META} nor {LATEST} there)")


def full_fp32_state_dict(engine, trainable_only: bool = False) -> dict[str, torch.Tensor]:
    """Collective under ZeRO: every parameter's (or only the trained ones') full fp32 master copy, on the CPU."""
    from deepspeed.utils import safe_get_full_fp32_param

    weights = {}
    for name, param in engine.module.named_parameters():  # frozen ones (a LoRA base) are held whole
        if trainable_only and not param.requires_grad:
            continue
        full = safe_get_full_fp32_param(param)
        weights[name] = (param.detach() if full is None else full).float().cpu().clone()
    return weights


def rng_state(placement: Placement) -> dict:
    """Python and torch RNG states (CUDA's too on a GPU)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if placement.cuda:
        state["cuda"] = torch.cuda.get_rng_state(placement.device)
    return state


def restore_rng(path: Path, placement: Placement) -> None:
    """Restore this rank's RNG states when the checkpoint had such a rank; else keep the seed's."""
    if not path.is_file():
        return
    state = torch.load(path, map_location="cpu", weights_only=True)
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if placement.cuda and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], placement.device)


def _dtype(placement: Placement) -> str:
    return "bfloat16" if placement.cuda else "float32"


def _meta(launch: RankLaunch, placement: Placement, spec: ModelSpec, state: TrainState) -> dict:
    return {
        "format": FORMAT,
        "step": state.step,
        "samples_seen": state.samples_seen,
        "loss": state.loss,
        "eval_loss": state.eval_loss,
        "schedule": schedule_at(launch, state.step),  # the rate goes on from here after a resume
        "world_size": placement.world_size,
        "micro_batches": list(launch.micro_batches),
        "zero_stage": launch.zero_stage,
        "layout": layout(launch.zero_stage),
        "dtype": _dtype(placement),
        "model": spec.as_dict(),
        "dataset": launch.dataset,
        "seed": launch.seed,
        "job_id": launch.job_id,
        "epoch": launch.epoch,
        "saved_at": time.time(),
    }


def schedule_at(launch: RankLaunch, step: int) -> dict:
    """The learning-rate schedule's settings and the rate of the step after `step`."""
    settings = hyperparameters_of(launch)
    return {
        "hyperparameters": settings.as_dict(),
        "total_steps": launch.max_steps,
        "step": step,
        "next_lr": learning_rate_at(settings, step, launch.max_steps),
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _fsync_tree(directory: Path) -> None:
    """Flush every file (other ranks' shards too) before the rename makes them visible."""
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished directory into place, replacing an older save of the same step."""
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(final.parent)


def _point_latest(root: Path, name: str) -> None:
    tmp = root / f".{LATEST}.tmp-{os.getpid()}"
    tmp.write_text(name + "\n")
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
