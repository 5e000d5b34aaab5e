"""Ready a launch's model for its engine: stage it from storage, merge its adapter where needed, name it.

- A stored model (`store:models/7/<uuid>`, or a job's checkpoint tree with `model_folder` "model") and a stored
  adapter are staged into the replica's run folder the way a training rank stages its inputs
  (hosts/runtime/staging.py: the host's staging cache, the launch's storage grant); a local folder is used as
  it is.
- vLLM serves an adapter on its base (`--enable-lora`); for `transformers serve` the adapter is merged into
  its base (hosts/serving/merge.py, its own process) into a temporary folder of the run folder, removed when
  the engine stops.
- `transformers serve` names a model by the path it is given: the engine's working folder gets a link named
  after the deployment (`<run>/engine/<served name>` -> the model's folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hosts.serving.engines import OFFLINE
from kernel.serving import ENGINE_VLLM, EngineLaunch
from kernel.storage.locations import is_stored, key_of

MERGE_TIMEOUT_S = 3600.0
REPO_ROOT = str(Path(__file__).resolve().parents[2])  # where `-m hosts.serving.merge` imports from


class PrepareFailed(RuntimeError):
    """The model or adapter could not be made ready (the message says which and why)."""


@dataclass
class Prepared:
    folder: Path  # what the engine loads
    adapter: Path | None  # what vLLM serves on it (None: none, or merged into `folder`)
    workdir: Path  # the engine's working folder
    temporary: list[Path] = field(default_factory=list)  # removed when the engine stops


def prepare(launch: EngineLaunch) -> Prepared:
    """The launch's model ready for its engine; `launch.run_dir` must be set."""
    run_dir = Path(launch.run_dir)
    folder = _local(launch, launch.model, launch.model_folder)
    adapter = _local(launch, launch.adapter) if launch.adapter else None
    for path, what in ((folder, "model"), (adapter, "adapter")):
        if path is not None and not path.is_dir():
            raise PrepareFailed(f"the {what} folder {path} does not exist")
    temporary: list[Path] = []
    if adapter is not None and launch.engine != ENGINE_VLLM:
        merged = Path(tempfile.mkdtemp(prefix="merged-", dir=run_dir))
        temporary.append(merged)
        merge_in_subprocess(folder, adapter, merged)
        folder, adapter = merged, None
    if launch.engine == ENGINE_VLLM:
        return Prepared(folder, adapter, run_dir, temporary)
    workdir = run_dir / "engine"
    link_name(workdir, launch.served_model_name, folder)
    return Prepared(folder, None, workdir, temporary)


def _local(launch: EngineLaunch, value: str, folder: str | None = None) -> Path:
    if not is_stored(value):
        return Path(value) / folder if folder else Path(value)
    from hosts.runtime.staging import stage_tree  # the store's client: only where something is stored

    key = key_of(value)
    if not folder:
        return stage_tree(launch, key)
    return stage_tree(launch, key, select=lambda member: member.startswith(folder + "/")) / folder


def merge_in_subprocess(base: Path, adapter: Path, out: Path, timeout_s: float = MERGE_TIMEOUT_S) -> Path:
    argv = [sys.executable, "-m", "hosts.serving.merge", "--base", str(base), "--adapter", str(adapter)]
    pythonpath = os.environ.get("PYTHONPATH")
    try:
        done = subprocess.run(
            [*argv, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **OFFLINE, "PYTHONPATH": os.pathsep.join(filter(None, (REPO_ROOT, pythonpath)))},
        )
    except subprocess.TimeoutExpired as error:
        raise PrepareFailed(f"merging the adapter into its base took over {timeout_s:.0f} s") from error
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise PrepareFailed(f"merging the adapter into its base failed:\n{tail}")
    return out


def link_name(workdir: Path, name: str, folder: Path) -> Path:
    """`workdir/name` -> `folder` (replacing an older link), so that the server's model is named `name`."""
    link = workdir / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(folder.resolve(), target_is_directory=True)
    return link
