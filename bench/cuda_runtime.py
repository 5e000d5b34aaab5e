"""The training runtime on real GPUs: a 1.3B Llama trained from scratch, N ranks over NCCL, bf16.

    .venv/bin/python bench/cuda_runtime.py [--gpus N] [--steps 30] [--warmup 5] [--micro-batch 4]
        [--zero-stage 1] [--gradient-checkpointing] [--peak-tflops 989] [--checkpoint]

The model is a transformers LlamaForCausalLM built from a config (hidden 2048, 24 layers, 16 heads,
8 key/value heads, FFN 5632, vocabulary 32000, sequence 2048: ~1.26 B parameters), started by
hosts.runtime.local the way an agent starts ranks (one process per GPU, device cuda:<rank>,
synthetic data). Each rank's tokens/s and step time are medians over the steps after warm-up;
peak memory is torch.cuda.max_memory_allocated as the rank reports it; MFU = tokens/s x the
spec's training FLOPs per token / the GPU's peak dense bf16 FLOPS (H100/H200 989 TFLOPS,
A100 312; others need --peak-tflops). Recomputation under --gradient-checkpointing is not counted
as useful work, so it lowers MFU.

Once the measured steps are done the job is stopped through its control file without a
checkpoint (a 1.3B model's optimizer state is ~15 GB to write); --checkpoint lets it finish and
save instead, and times that save. On a machine without CUDA it says it was skipped and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hosts.runtime.local import LocalJob, job_launches, metrics  # noqa: E402
from kernel.catalog import CHIP_TYPES  # noqa: E402
from kernel.modelspecs import spec_from_config  # noqa: E402
from kernel.protocol import CONTROL_FILE, RankLaunch  # noqa: E402

CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 32000,
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "intermediate_size": 5632,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
SEQ_LEN = 2048
SPEC = spec_from_config("llama-1.3b", CONFIG, SEQ_LEN)
# Dense bf16 peak by a name the device reports (torch.cuda.get_device_name), in TFLOPS.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}
# The seed catalog's chip type of a GPU model, whose default MFU the platform prices with.
CATALOG_SLUGS = {"H100": "h100-80g", "A100": "a100-80g", "RTX 4090": "rtx-4090"}
STOP_MARGIN_STEPS = 1000  # max_steps beyond the measured ones: the control file's stop ends the run first


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A visible CUDA device: its name (which tells its peak FLOPS) and its memory."""

    name: str
    memory_gib: float


def cuda_devices() -> list[Gpu]:
    """The visible CUDA devices ([] without CUDA or torch)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    devices = [torch.cuda.get_device_properties(index) for index in range(torch.cuda.device_count())]
    return [Gpu(device.name, device.total_memory / 2**30) for device in devices]


def peak_tflops(device_name: str, chosen: float | None) -> float | None:
    """--peak-tflops when given, else the known peak of this GPU model, else None (MFU not shown)."""
    if chosen:
        return chosen
    return next((peak for model, peak in PEAK_BF16_TFLOPS.items() if model in device_name), None)


def catalog_mfu(device_name: str) -> tuple[str, float] | None:
    """(chip name, default MFU) of the catalog chip type this GPU is; None when the catalog has no such chip."""
    slug = next((slug for model, slug in CATALOG_SLUGS.items() if model in device_name), None)
    return next(((row[1], float(row[8])) for row in CHIP_TYPES if row[0] == slug), None)


def launch_model(args) -> dict:
    """The launch file's model: the spec the planner reads plus the config the runtime builds."""
    model = {**SPEC.as_dict(), "config": dict(CONFIG)}
    if args.gradient_checkpointing:
        model["gradient_checkpointing"] = True
    return model


def rank_launches(args, gpus: int, workdir: Path) -> list[RankLaunch]:
    """One launch per GPU, rank r on cuda:r (LOCAL_RANK r), as an agent places a one-node job."""
    max_steps = args.steps if args.checkpoint else args.steps + STOP_MARGIN_STEPS
    launches = job_launches(
        [args.micro_batch] * gpus,
        workdir / "run",
        model=launch_model(args),
        zero_stage=args.zero_stage,
        max_steps=max_steps,
        checkpoint_every=0,
        checkpoint_dir=str(workdir / "checkpoints"),
        learning_rate=3e-4,
    )
    return [dataclasses.replace(launch, device=f"cuda:{launch.rank}") for launch in launches]


def request_stop(run_dir: str) -> None:
    """Ask the job to stop after its current step without a checkpoint, as an agent does (atomic write)."""
    path = Path(run_dir) / CONTROL_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"checkpoint": 0, "stop": True, "stop_checkpoint": False, "epoch": 1}))
    os.replace(temporary, path)


def train(job: LocalJob, args) -> None:
    """Run the job until rank 0 reported `args.steps` steps (then stop it), or to its end with --checkpoint."""
    deadline = time.monotonic() + args.timeout
    job.start()
    while not args.checkpoint and time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in job.procs):  # one ended early: the others would wait in NCCL
            job.kill()
            break
        if max(metrics(job.events(0)), default=0) >= args.steps:
            request_stop(job.launches[0].run_dir)
            break
        time.sleep(0.5)
    codes = job.wait(max(deadline - time.monotonic(), 1.0))
    if any(codes):
        raise RuntimeError(f"ranks exited with {codes}:\n{job.stderr_tail()}")


def report(job: LocalJob, gpus: int, devices: list[Gpu], args) -> None:
    spec = SPEC
    flops_per_token = spec.training_flops_per_token
    print(
        f"model {spec.name}: {spec.parameters / 1e9:.2f} B parameters (hidden {spec.hidden_size}, "
        f"{spec.num_layers} layers, {spec.num_heads}/{spec.num_kv_heads} heads, FFN {spec.ffn_size}, "
        f"vocab {spec.vocab_size}), seq {spec.seq_len}, {flops_per_token / 1e9:.2f} GFLOP per trained token"
    )
    print(
        f"{gpus} x {devices[0].name} ({devices[0].memory_gib:.0f} GiB), NCCL, bf16, ZeRO {args.zero_stage}, "
        f"micro-batch {args.micro_batch}, "
        f"gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}; "
        f"medians of steps {args.warmup + 1}-{args.steps}"
    )
    print(f"{'rank':<6}{'device':<24}{'tokens/s':>11}{'step (ms)':>11}{'peak mem (GiB)':>16}{'MFU':>8}{'loss':>8}")
    total = 0.0
    for rank in range(gpus):
        measured = [e for step, e in sorted(metrics(job.events(rank)).items()) if args.warmup < step <= args.steps]
        if not measured:
            print(f"{rank:<6}no metric after warm-up (steps {args.warmup + 1}-{args.steps})")
            continue
        tokens_per_s = statistics.median(e["tokens_per_s"] for e in measured)
        step_ms = 1000 * statistics.median(e["step_time_s"] for e in measured)
        peak = peak_tflops(devices[rank].name, args.peak_tflops)
        mfu = f"{tokens_per_s * flops_per_token / (peak * 1e12):.3f}" if peak else "n/a"
        total += tokens_per_s
        last = measured[-1]
        loss = f"{last['loss']:.3f}" if last["loss"] is not None else "-"
        print(
            f"{rank:<6}{devices[rank].name[:23]:<24}{tokens_per_s:>11,.0f}{step_ms:>11.1f}"
            f"{last['memory_mb'] / 1024:>16.1f}{mfu:>8}{loss:>8}"
        )
    print(f"{'total':<30}{total:>11,.0f}")
    peak = peak_tflops(devices[0].name, args.peak_tflops)
    print(f"peak bf16 used for MFU: {f'{peak:g} TFLOPS' if peak else 'unknown GPU, pass --peak-tflops'}")
    known = catalog_mfu(devices[0].name)
    if known:
        print(f"the catalog prices {known[0]} at a default MFU of {known[1]:.2f}")
    for event in job.events(0):
        if event["event"] == "checkpoint":
            print(f"final checkpoint (with Hugging Face export): {event['seconds']:.2f} s")
    startup = [line for line in job.stderr_path(0).read_text().splitlines() if "ready in" in line]
    print(f"rank 0 start-up: {startup[-1] if startup else 'n/a'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=0, help="ranks to run, one per GPU (default: every visible GPU)")
    parser.add_argument("--steps", type=int, default=30, help="steps to measure up to (warm-up included)")
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the medians")
    parser.add_argument("--zero-stage", type=int, default=1, choices=(0, 1, 2))
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per rank per step")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute each layer in backward")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak (default: known by name)")
    parser.add_argument("--checkpoint", action="store_true", help="finish at --steps and time the final save")
    parser.add_argument("--timeout", type=float, default=540, help="seconds before the job is killed")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    if args.micro_batch < 1:
        parser.error("--micro-batch must be at least 1")
    devices = cuda_devices()
    if not devices:
        print("cuda_runtime: skipped: no CUDA device on this machine")
        return 0
    gpus = min(args.gpus or len(devices), len(devices))
    with tempfile.TemporaryDirectory(prefix="bench-cuda-") as tmp:
        workdir = Path(tmp)
        (workdir / "run").mkdir()
        job = LocalJob(rank_launches(args, gpus, workdir), workdir)
        train(job, args)
        report(job, gpus, devices, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
