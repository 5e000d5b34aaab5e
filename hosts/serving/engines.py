"""The command line and environment of each engine, for a prepared model (hosts/serving/prepare.py).

vLLM (CUDA hosts):
    vllm serve <folder> --served-model-name <name> --host H --port P [--max-model-len N]
        [--enable-lora --lora-modules <name>=<adapter> --max-lora-rank R]   (the base is then <name>-base)
    with CUDA_VISIBLE_DEVICES=N for device cuda:N.

transformers' own OpenAI-compatible server (CPU and simulated hosts; transformers 5):
    transformers serve <name> --device cpu --host H --port P [--max-model-len N] --log-level warning
    run in a folder where <name> is a link to the model's folder. `transformers serve` names a model by
    the path it was given (`/v1/models`, and the `model` a request must name); a path relative to the
    server's working folder is the only way to make that name the deployment's. It has no LoRA option:
    an adapter is merged into its base first (prepare.py).

Both run offline (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE): nothing is downloaded from a hub.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from kernel.serving import ENGINE_VLLM, EngineLaunch

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's --max-lora-rank takes
VLLM_DEFAULT_LORA_RANK = 16
BASE_SUFFIX = "-base"  # vLLM with an adapter: the adapter is the deployment's name, its base this one's


def console_script(name: str) -> str:
    """The program `name` installed beside this Python (the same virtual environment), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


def engine_available(engine: str) -> bool:
    """Whether this host can run `engine` (vLLM is installed only on CUDA hosts)."""
    from importlib.util import find_spec

    if engine == ENGINE_VLLM:
        return find_spec("vllm") is not None
    return find_spec("fastapi") is not None and find_spec("uvicorn") is not None


def command(launch: EngineLaunch, folder: Path, adapter: Path | None = None) -> list[str]:
    """The engine's argv serving `folder` (for transformers: the link named after the model, see prepare.py)."""
    if launch.engine == ENGINE_VLLM:
        return vllm_command(launch, folder, adapter)
    if adapter is not None:
        raise ValueError("transformers serve takes no adapter: merge it into its base first (prepare.py)")
    return transformers_command(launch)


def vllm_command(launch: EngineLaunch, folder: Path, adapter: Path | None = None) -> list[str]:
    name = launch.served_model_name
    argv = [console_script("vllm"), "serve", str(folder)]
    argv += ["--served-model-name", name + BASE_SUFFIX if adapter else name]
    argv += ["--host", launch.host, "--port", str(launch.port)]
    if launch.max_model_len:
        argv += ["--max-model-len", str(launch.max_model_len)]
    if adapter is not None:
        argv += ["--enable-lora", "--lora-modules", f"{name}={adapter}"]
        rank = vllm_lora_rank(adapter)
        if rank != VLLM_DEFAULT_LORA_RANK:
            argv += ["--max-lora-rank", str(rank)]
    return argv


def vllm_lora_rank(adapter: Path) -> int:
    """The smallest --max-lora-rank vLLM takes that holds the adapter's rank (adapter_config.json's `r`)."""
    try:
        rank = int(json.loads((adapter / "adapter_config.json").read_text()).get("r") or 0)
    except (OSError, ValueError):
        rank = 0
    fitting = [allowed for allowed in VLLM_LORA_RANKS if allowed >= max(rank, VLLM_DEFAULT_LORA_RANK)]
    if not fitting:
        raise ValueError(f"LoRA rank {rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})")
    return fitting[0]


def transformers_command(launch: EngineLaunch) -> list[str]:
    argv = [console_script("transformers"), "serve", launch.served_model_name]
    argv += ["--device", launch.device, "--host", launch.host, "--port", str(launch.port)]
    if launch.max_model_len:
        argv += ["--max-model-len", str(launch.max_model_len)]
    return argv + ["--log-level", "warning"]


def environment(launch: EngineLaunch, base: dict[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: the host's, offline, and on CUDA only the launch's device visible to vLLM."""
    env = dict(os.environ if base is None else base)
    env.update(OFFLINE)
    env["PYTHONUNBUFFERED"] = "1"
    if launch.engine == ENGINE_VLLM and launch.device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = launch.device.split(":", 1)[1]
    return env
