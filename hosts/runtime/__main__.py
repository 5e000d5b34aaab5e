"""Entry point of a rank: `python -m hosts.runtime --config launch.json`.

The node agent starts one such process per rank with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT set. Events go to stdout as JSON lines; anything else the process
prints goes to stderr. An exception prints its traceback on stderr and exits with status 1.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from hosts.runtime.progress import quiet_libraries  # noqa: E402
from kernel.priority import carry_nice_to_session  # noqa: E402
from kernel.protocol import RankLaunch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STANDBY_READY = "standby ready"
# A rank reads only local model files: nothing is ever fetched from the Hugging Face Hub. Set before
# huggingface_hub is imported (it reads them once).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
quiet_libraries()  # before a standby imports them: the job's log is the rank's, not its libraries'


def load_launch(path: str | Path) -> RankLaunch:
    """The launch file as a RankLaunch; unknown keys are ignored, missing required ones fail."""
    data = json.loads(Path(path).read_text())
    known = {field.name for field in dataclasses.fields(RankLaunch)}
    return RankLaunch(**{key: value for key, value in data.items() if key in known})


def prepare_environment(launch: RankLaunch) -> None:
    """Settings that must be in place before torch or DeepSpeed is imported."""
    # Keep JIT-built DeepSpeed ops in one cache per checkout rather than ~/.cache.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".data" / "torch_extensions"))
    # A simulated chip trains on the CPU even on a host that has a GPU.
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if launch.device.startswith("cuda") else "cpu")
    if launch.device == "cpu":
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank: ranks share the cores


def standby() -> int:
    """A warm rank: import torch, DeepSpeed and what they load lazily now, then wait for a launch.

    The agent keeps one ready per chip and hands it a launch as one JSON line on stdin,
    {"argv": [...], "env": {...}, "cwd": "..."}; a rank then starts in a fraction of a second
    instead of the ~5 s these imports take. End of input (the agent is gone) ends it quietly.
    """
    import deepspeed  # noqa: F401
    import peft  # noqa: F401
    import torch._dynamo  # noqa: F401  (torch.optim imports it on first use: half of the start-up)
    import transformers.models.llama.modeling_llama  # noqa: F401  (the model classes load lazily: seconds)
    import transformers.models.mistral.modeling_mistral  # noqa: F401
    import transformers.models.qwen2.modeling_qwen2  # noqa: F401

    from hosts.runtime import train  # noqa: F401

    print(STANDBY_READY, flush=True)  # the agent reads this one line before the rank's own output
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    global STARTED
    STARTED = time.perf_counter()
    return main(request["argv"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hosts.runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the rank's launch.json (a RankLaunch)")
    args = parser.parse_args(argv)
    launch = load_launch(args.config)
    prepare_environment(launch)
    from hosts.runtime.events import EventStream, claim_stdout

    events = EventStream(launch.rank, claim_stdout())
    from hosts.runtime.train import run

    print(f"rank {launch.rank}: imports took {time.perf_counter() - STARTED:.2f} s", file=sys.stderr, flush=True)
    run(launch, events)
    return 0


if __name__ == "__main__":
    os.umask(0o077)  # checkpoints and run files hold a user's model and data: 0600 files, 0700 folders
    carry_nice_to_session()  # each rank is a session of its own (kernel/priority.py)
    try:
        sys.exit(standby() if sys.argv[1:] == ["--standby"] else main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
