"""The topology-free form of a checkpoint: DeepSpeed's universal checkpoint layout.

`universal/zero/<param name>/{fp32,exp_avg,exp_avg_sq,step}.pt` hold each parameter's full
fp32 weight and Adam moments, whatever world size and ZeRO stage wrote them, so a job can
resume on another mix of chips. Conversion happens lazily, the first time a checkpoint is
resumed on a topology other than its own, by rank 0 into a temp directory renamed into place.

- ZeRO 1-2 source (fp32 or bf16): `deepspeed.checkpoint.ds_to_universal`, in-process.
- no ZeRO ("plain": the whole optimizer state sits in the model-states file): DeepSpeed's
  converter needs ZeRO shards, so `_write_from_plain` writes the same layout.
- ZeRO 1-2 target: DeepSpeed's `load_universal`. Plain target: DeepSpeed has no universal
  loader without a ZeRO optimizer, so `load_into_plain` copies the tensors in.
"""

from __future__ import annotations

import os
import shutil
from argparse import Namespace
from pathlib import Path

import torch

TAG = "universal"
MODEL_STATES = "mp_rank_00_model_states.pt"
MOMENTS = ("exp_avg", "exp_avg_sq")


def client_state() -> dict:
    """What `save_checkpoint` must carry for `ds_to_universal` to accept the checkpoint."""
    from deepspeed.checkpoint.constants import (
        UNIVERSAL_CHECKPOINT_INFO,
        UNIVERSAL_CHECKPOINT_VERSION_KEY,
        UNIVERSAL_CHECKPOINT_VERSION_VALUE,
    )

    return {UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE}}


def ensure(step_dir: Path, plain: bool, workers: int = 1) -> Path:
    """`step_dir/universal`, converting `step_dir/ds` first if it is not there yet."""
    out = step_dir / TAG
    if out.is_dir():
        return out
    tmp = step_dir / f".tmp-{TAG}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    source = step_dir / "ds"
    if plain:
        _write_from_plain(source, tmp)
    else:
        _run_ds_to_universal(source, tmp, workers)
    # ds_to_universal also drops a `latest_universal` pointer beside its output; we name tags.
    (step_dir / "latest_universal").unlink(missing_ok=True)
    try:
        tmp.rename(out)
    except OSError:
        if not out.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process converted it first
    return out


def _run_ds_to_universal(source: Path, out: Path, workers: int) -> None:
    """DeepSpeed's converter, in-process (one worker avoids a process pool for small models)."""
    from deepspeed.checkpoint.ds_to_universal import main

    args = Namespace(
        input_folder=str(source),
        output_folder=str(out),
        num_extract_workers=workers,
        num_merge_workers=max(1, workers // 2),
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=False,
    )
    main(args)


def _write_from_plain(source: Path, out: Path) -> None:
    """The universal layout from a no-ZeRO checkpoint (module + the whole optimizer state).

    In fp32 the optimizer state is torch AdamW's own; under bf16 DeepSpeed wraps it and keeps
    the fp32 master weights beside it ("fp32_groups"), which are then the weights to keep.
    """
    import deepspeed

    states = torch.load(source / MODEL_STATES, map_location="cpu", weights_only=True)
    module, optimizer = states["module"], states["optimizer"]
    # state_dict order is parameter order (the model saves no buffers, and a LoRA job's frozen base is
    # excluded from its checkpoints), so optimizer index i is module key i.
    names = list(module.keys())
    masters = [t for group in optimizer.get("fp32_groups", []) for t in group]
    adam = optimizer.get("optimizer_state_dict", optimizer)
    for group in adam["param_groups"]:
        for index in group["params"]:
            weight = masters[index] if masters else module[names[index]]
            _write_param(out / "zero" / names[index], weight, adam["state"].get(index, {}))
    common = {
        "param_groups": adam["param_groups"],
        "ds_version": states.get("ds_version", deepspeed.__version__),
    }
    torch.save(common, out / "zero" / "optimizer_state.pt")
    # The model-states file carries DeepSpeed's bookkeeping (steps, world size) for the loader.
    torch.save({**states, "optimizer": None}, out / MODEL_STATES)


def _write_param(directory: Path, weight: torch.Tensor, state: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"cat_dim": 0, "param": weight.float()}, directory / "fp32.pt")
    for key in MOMENTS:
        if key in state:
            torch.save({"cat_dim": 0, "param": state[key].float()}, directory / f"{key}.pt")
    if "step" in state:
        torch.save(torch.tensor(float(state["step"])), directory / "step.pt")


def load_into_plain(engine, folder: Path) -> None:
    """Copy universal weights and Adam moments into a no-ZeRO engine.

    fp32: straight into the module and torch's AdamW. bf16: DeepSpeed's wrapper holds fp32
    masters (`fp32_groups`) that its inner AdamW steps; those get the weights and the moments,
    and the bf16 module a rounded copy.
    """
    wrapper = engine.optimizer
    masters = [p for group in getattr(wrapper, "fp32_groups", []) for p in group]
    adam = wrapper.optimizer if masters else wrapper
    common = torch.load(folder / "zero" / "optimizer_state.pt", map_location="cpu", weights_only=True)
    trained = [(name, param) for name, param in engine.module.named_parameters() if param.requires_grad]
    for index, (name, param) in enumerate(trained):
        master = masters[index] if masters else param
        _load_param(folder / "zero" / name, master, adam.state[master])
        if masters:
            with torch.no_grad():
                param.copy_(master)
    for group, saved in zip(adam.param_groups, common["param_groups"], strict=True):
        group.update({key: value for key, value in saved.items() if key != "params"})


def _load_param(directory: Path, master: torch.Tensor, state: dict) -> None:
    with torch.no_grad():
        master.copy_(_tensor(directory / "fp32.pt").reshape(master.shape))
    for key in MOMENTS:
        if (directory / f"{key}.pt").is_file():
            state[key] = _tensor(directory / f"{key}.pt").reshape(master.shape).to(master).clone()
    if (directory / "step.pt").is_file():
        step = torch.load(directory / "step.pt", map_location="cpu", weights_only=True)
        state["step"] = torch.tensor(float(step), dtype=torch.float32)


def _tensor(path: Path) -> torch.Tensor:
    return torch.load(path, map_location="cpu", weights_only=True)["param"]
