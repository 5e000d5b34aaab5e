"""A stand-in for `python -m hosts.runtime`: prints metric events, obeys control.json.

Behaviour comes from launch.json's "extra": steps (-1 = until stopped), step_s, exit_code,
stderr (lines to print before exiting), ignore_stop, ignore_sigterm, log_burst (lines per step),
stage (leave staged inputs and a save's temp folder in the run folder).
It writes the torch.distributed environment it got to env.json in its working directory, the
socket interface variables (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) to socket_env.json, and what it
knows of storage (the platform's URL, any store variable: STORAGE_URL, AWS_*) to storage_env.json.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "PYTHONUNBUFFERED",
    "CUDA_VISIBLE_DEVICES",
)
SOCKET_KEYS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
STORAGE_KEYS = ("STORAGE_URL", "STORAGE_PUBLIC_ENDPOINT_URL", "STARVERSE_PLATFORM_URL")


def emit(**event):
    print(json.dumps(event), flush=True)


def main() -> int:
    launch = json.loads(Path(sys.argv[sys.argv.index("--config") + 1]).read_text())
    extra = launch.get("extra", {})
    Path("env.json").write_text(json.dumps({key: os.environ.get(key) for key in ENV_KEYS}))
    Path("socket_env.json").write_text(json.dumps({key: os.environ.get(key) for key in SOCKET_KEYS}))
    storage = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k in STORAGE_KEYS}
    Path("storage_env.json").write_text(json.dumps(storage))
    if extra.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"fake rank {launch['rank']} starting", flush=True)
    if extra.get("stage"):  # what a real rank leaves in the run folder: staged inputs, a save in progress
        for folder in ("inputs/datasets_1", "resume/step-4", "checkpoints/.tmp-step-8-e1"):
            (Path(launch["run_dir"]) / folder).mkdir(parents=True, exist_ok=True)
            (Path(launch["run_dir"]) / folder / f"file-{launch['rank']}").write_text("x")
    control_path = Path(launch["run_dir"]) / "control.json"
    seen, step, steps = 0, 0, extra.get("steps", 3)
    while steps < 0 or step < steps:
        control = json.loads(control_path.read_text()) if control_path.exists() else {}
        if control.get("checkpoint", 0) > seen:
            seen = control["checkpoint"]
            emit(event="checkpoint", step=step, path=f"ckpt-{step}", seconds=0.01)
        if control.get("stop") and not extra.get("ignore_stop"):
            emit(event="done", step=step)
            return 0
        step += 1
        emit(
            event="metric",
            step=step,
            loss=1.0 / step,
            tokens=64 * step,
            tokens_per_s=640.0,
            step_time_s=0.1,
            samples_seen=step,
            memory_mb=10.0,
            extra_field="ignored",
        )
        for index in range(extra.get("log_burst", 0)):
            print(f"burst {step}.{index}", flush=True)
        time.sleep(extra.get("step_s", 0.05))
    for line in extra.get("stderr", []):
        print(line, file=sys.stderr, flush=True)
    emit(event="done", step=step)
    return extra.get("exit_code", 0)


if __name__ == "__main__":
    sys.exit(main())
