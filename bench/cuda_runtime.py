"""The training runtime on real GPUs: N ranks over NCCL, bf16, a mid-size Llama, ~30 steps.

    .venv/bin/python bench/cuda_runtime.py [--gpus N] [--steps 30] [--zero-stage 1] [--micro-batch 8]

Prints each rank's tokens/s and step time (median over the steps after warm-up), its peak
CUDA memory, and the final checkpoint's save time. On a machine without CUDA it says it was
skipped and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.modelspecs import ModelSpec  # noqa: E402
from workers.runtime.local import LocalJob, job_launches, metrics  # noqa: E402

# ~0.2 B parameters: grouped-query attention like the 70B, small enough for one GPU of any size.
MID = ModelSpec(
    "llama-mid",
    vocab_size=32000,
    hidden_size=1024,
    num_layers=12,
    num_heads=16,
    num_kv_heads=4,
    ffn_size=2816,
    seq_len=1024,
)


def cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(args, gpus: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-cuda-") as tmp:
        workdir = Path(tmp)
        launches = job_launches(
            [args.micro_batch] * gpus,
            workdir,
            model=MID.as_dict(),
            zero_stage=args.zero_stage,
            max_steps=args.steps,
            checkpoint_every=0,
            learning_rate=3e-4,
        )
        for launch in launches:
            launch.device = f"cuda:{launch.rank}"
        job = LocalJob(launches, workdir)
        job.run(timeout=args.timeout)
        report(job, gpus, args)


def report(job: LocalJob, gpus: int, args) -> None:
    print(
        f"model {MID.name}: {MID.parameters / 1e6:.0f} M parameters, seq {MID.seq_len}; "
        f"{gpus} GPU(s), NCCL, bf16, ZeRO {args.zero_stage}, micro-batch {args.micro_batch}, "
        f"{args.steps} steps ({args.warmup} warm-up)"
    )
    print(f"{'rank':<6}{'tokens/s':>12}{'step (ms)':>12}{'peak mem (MiB)':>16}{'last loss':>11}")
    total = 0.0
    for rank in range(gpus):
        measured = [e for step, e in metrics(job.events(rank)).items() if step > args.warmup]
        tokens_per_s = statistics.median(e["tokens_per_s"] for e in measured)
        step_ms = 1000 * statistics.median(e["step_time_s"] for e in measured)
        total += tokens_per_s
        last = measured[-1]
        print(f"{rank:<6}{tokens_per_s:>12,.0f}{step_ms:>12.1f}{last['memory_mb']:>16,.0f}{last['loss']:>11.3f}")
    print(f"{'total':<6}{total:>12,.0f}")
    for event in job.events(0):
        if event["event"] == "checkpoint":
            print(f"final checkpoint (with model.pt export): {event['seconds']:.2f} s")
    startup = [line for line in job.stderr_path(0).read_text().splitlines() if "ready in" in line]
    print(f"rank 0 start-up: {startup[-1] if startup else 'n/a'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=0, help="ranks to run (default: every visible GPU)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=540)
    args = parser.parse_args()
    available = cuda_devices()
    if available == 0:
        print("cuda_runtime: skipped (no CUDA device on this machine)")
        return 0
    run(args, min(args.gpus or available, available))
    return 0


if __name__ == "__main__":
    sys.exit(main())
