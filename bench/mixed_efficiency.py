"""Mixed-chip training efficiency on simulated chips of speed 1:2:4.

Three ranks of llama-tiny, each paced to its chip's modelled speed, train with
- balanced micro-batches (proportional to speed), and
- equal micro-batches (the same global batch split evenly);
and each rank also trains alone ("solo") at its balanced micro-batch. Targets:
efficiency = balanced tokens/s / sum of solo tokens/s >= 0.90, and
speedup = balanced tokens/s / equal tokens/s >= 1.6.

    .venv/bin/python bench/mixed_efficiency.py [--steps 40] [--speeds 1000,2000,4000] [--check]

Every figure is measured from the ranks' own metric events (tokens / step time, summed over
the measured steps, warm-up steps left out).

Why 1000/2000/4000 tokens/s by default: pacing models a chip only while the real compute fits
inside the modelled step. The balanced mix puts three ranks on a 2-core host, ~40 ms of real
work per step, more when other processes hold the cores; a 128 ms step leaves that headroom,
a 64 ms step (2000/4000/8000) does not always: then efficiency measures the host, not the mix.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hosts.runtime.local import LocalJob, job_launches, metrics  # noqa: E402
from kernel.modelspecs import resolve_model  # noqa: E402

MODEL = "llama-tiny"


@dataclass
class Result:
    """One run's measured throughput."""

    name: str
    micro_batches: list[int]
    tokens_per_s: float
    step_ms: float


def measure(workdir: Path, name: str, micro_batches: list[int], speeds: list[float], args) -> Result:
    """Run one job and sum each rank's tokens / step time over the measured steps."""
    launches = job_launches(
        micro_batches,
        workdir / name,
        model=resolve_model(MODEL).as_dict(),
        zero_stage=args.zero_stage,
        max_steps=args.warmup + args.steps,
        checkpoint_every=0,
    )
    for launch, speed in zip(launches, speeds, strict=True):
        launch.paced_tokens_per_s = speed
    job = LocalJob(launches, workdir / name)
    job.run(timeout=600)
    total, step_times = 0.0, []
    for rank in range(len(launches)):
        measured = [e for step, e in metrics(job.events(rank)).items() if step > args.warmup]
        total += sum(e["tokens"] for e in measured) / sum(e["step_time_s"] for e in measured)
        step_times += [e["step_time_s"] for e in measured]
    return Result(name, micro_batches, total, 1000 * sum(step_times) / len(step_times))


def balanced_split(global_batch: int, speeds: list[float]) -> list[int]:
    """Largest-remainder split of the global batch in proportion to speed (the planner's rule)."""
    shares = [global_batch * s / sum(speeds) for s in speeds]
    split = [int(share) for share in shares]
    by_remainder = sorted(range(len(speeds)), key=lambda i: shares[i] - split[i], reverse=True)
    for i in by_remainder[: global_batch - sum(split)]:
        split[i] += 1
    return [max(1, n) for n in split]


def even_split(global_batch: int, ranks: int) -> list[int]:
    return [global_batch // ranks + (1 if r < global_batch % ranks else 0) for r in range(ranks)]


def print_table(results: list[Result], solo_sum: float, args, speeds: list[float]) -> tuple[float, float]:
    balanced, equal = results[0], results[1]
    efficiency, speedup = balanced.tokens_per_s / solo_sum, balanced.tokens_per_s / equal.tokens_per_s
    print(
        f"config: {MODEL}, ZeRO {args.zero_stage}, gloo on CPU, {len(speeds)} ranks paced to "
        f"{'/'.join(f'{s:g}' for s in speeds)} tokens/s; "
        f"{args.steps} steps measured after {args.warmup} warm-up"
    )
    print(f"{'run':<12}{'micro-batches':<16}{'tokens/s':>12}{'mean step (ms)':>17}")
    for r in results:
        print(f"{r.name:<12}{str(r.micro_batches):<16}{r.tokens_per_s:>12,.0f}{r.step_ms:>17.1f}")
    print(f"{'sum of solo':<28}{solo_sum:>12,.0f}")
    print(f"efficiency  balanced / sum of solo = {efficiency:.3f}   (target >= 0.90)")
    print(f"speedup     balanced / equal       = {speedup:.2f}x   (target >= 1.6)")
    return efficiency, speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speeds", default="1000,2000,4000", help="paced tokens/s per rank")
    parser.add_argument("--global-batch", type=int, default=14)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--zero-stage", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    speeds = [float(s) for s in args.speeds.split(",")]
    load_before = os.getloadavg()[0]
    balanced = balanced_split(args.global_batch, speeds)
    with tempfile.TemporaryDirectory(prefix="bench-mixed-") as tmp:
        workdir = Path(tmp)
        results = [
            measure(workdir, "balanced", balanced, speeds, args),
            measure(workdir, "equal", even_split(args.global_batch, len(speeds)), speeds, args),
        ]
        for rank, (batch, speed) in enumerate(zip(balanced, speeds, strict=True)):
            results.append(measure(workdir, f"solo r{rank}", [batch], [speed], args))
    solo_sum = sum(r.tokens_per_s for r in results[2:])
    efficiency, speedup = print_table(results, solo_sum, args, speeds)
    print(
        f"host: {os.cpu_count()} CPUs, 1-min load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after "
        "(other processes share these cores and stretch the real compute)"
    )
    return 1 if args.check and (efficiency < 0.90 or speedup < 1.6) else 0


if __name__ == "__main__":
    sys.exit(main())
