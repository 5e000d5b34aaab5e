"""The transformers runtime on a CPU: training speed against the legacy network, and LoRA's memory.

    .venv/bin/python bench/models_cpu.py [--quick]

a. Speed. One thread, as a simulated rank has (torch.set_num_threads(1)), fp32: a training step
   (forward, backward, AdamW step) of the transformers LlamaForCausalLM the runtime builds
   (hosts.runtime.hfmodel.build_model) against bench/legacy_model.LlamaModel of the same spec,
   on the same batch, for llama-tiny and a bigger grouped-query shape. The two alternate step by
   step (the order flips every round) and the table shows medians, so a neighbour's load lands on
   both alike. Each step's CPU time (this thread's) is measured beside its wall time: on a shared
   host the CPU-time ratio is the one that describes the code, and the goal (transformers no more
   than 10% slower, ratio >= 0.90) is judged on it. The forward / backward / optimizer split
   shows where a gap comes from.

b. Memory. A real 2-rank job (hosts.runtime.local, gloo, ZeRO 0) trains a config from scratch
   fully and then with the default LoRA adapter; each rank's memory_mb (its resident set size,
   from the metric events, the most any step reported) is printed beside the trainable parameter
   count, the fp32 model state a rank holds when it reports, after its optimizer step (weights 4N
   and AdamW's two moments 8T for N parameters of which T train; the step has freed the 4T of
   gradients), and the planner's per-rank estimate (kernel.planner.memory.rank_bytes: bf16
   weights with fp32 master copies, activation checkpointing and 1 GiB reserved, the GPU view the
   planner sizes chips with). The resident set also holds the interpreter, torch, DeepSpeed (and
   peft) themselves, some hundreds of MiB, so the full - lora row is the one to compare.

Every section prints its wall time, the CPU time spent in it and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench import legacy_model  # noqa: E402
from hosts.runtime import hfmodel  # noqa: E402
from hosts.runtime.local import LocalJob, job_launches, metrics  # noqa: E402
from kernel.modelfiles.hfconfig import lora_settings, model_shape  # noqa: E402
from kernel.modelspecs import LORA, ModelSpec, resolve_model, spec_from_config  # noqa: E402
from kernel.planner.memory import rank_bytes  # noqa: E402
from tests.support.hfmodels import tiny_config  # noqa: E402

SEED = 1234
SPEED_GOAL = 0.90  # transformers tokens/s / legacy tokens/s: no more than 10% slower
MIB = 2**20


@dataclass(frozen=True)
class Shape:
    """A network to time: its spec, the launch-file model dict the runtime builds it from, the batch,
    and how many timed steps each contender trains (a small model's steps are short and noisier)."""

    spec: ModelSpec
    model: dict
    batch: int
    steps: int


def speed_shapes(quick: bool) -> list[Shape]:
    tiny = resolve_model("llama-tiny")
    config = tiny_config(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
    )
    bigger = spec_from_config("llama-256x4", config, 64 if quick else 128)
    return [
        Shape(tiny, tiny.as_dict(), batch=8, steps=20 if quick else 60),
        Shape(bigger, {**bigger.as_dict(), "config": config}, batch=4, steps=6 if quick else 16),
    ]


class Usage:
    """Wall time, CPU time (this process and its finished children) and load average of a section."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.load = time.perf_counter(), self._cpu(), os.getloadavg()[0]

    @staticmethod
    def _cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def line(self) -> str:
        wall, cpu = time.perf_counter() - self.wall, self._cpu() - self.cpu
        return (
            f"wall {wall:.1f} s, CPU {cpu:.1f} s ({cpu / wall:.2f} cores busy), "
            f"load average {self.load:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
        )


@dataclass(frozen=True)
class StepTime:
    """One training step: wall seconds, and this thread's CPU seconds in each phase."""

    wall: float
    forward: float
    backward: float
    optimizer: float

    @property
    def cpu(self) -> float:
        return self.forward + self.backward + self.optimizer


class Contender:
    """A network, its AdamW (the runtime's settings) and a fixed batch; `step()` trains once and times it."""

    def __init__(self, name: str, model: torch.nn.Module, loss) -> None:
        self.name, self.model, self.loss = name, model, loss
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01)
        self.times: list[StepTime] = []

    def step(self, keep: bool = True) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        loss = self.loss()
        forward = time.thread_time()
        loss.backward()
        backward = time.thread_time()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        done = time.thread_time()
        if keep:
            self.times.append(StepTime(time.perf_counter() - wall, forward - cpu, backward - forward, done - backward))

    def median(self, field: str) -> float:
        return statistics.median(getattr(t, field) for t in self.times)


def contenders(shape: Shape) -> list[Contender]:
    """The runtime's transformers model and the legacy module of the same spec, on one batch."""
    spec = shape.spec
    batch = torch.randint(spec.vocab_size, (shape.batch, spec.seq_len + 1), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(batch, dtype=torch.bool)
    transformers_model = hfmodel.build_model(hfmodel.ModelSource.from_launch(shape.model), SEED)
    torch.manual_seed(SEED)
    legacy = legacy_model.LlamaModel(spec)
    return [
        Contender(
            "transformers", transformers_model, lambda: hfmodel.token_loss_sum(transformers_model, batch, mask)[0]
        ),
        Contender("legacy", legacy, lambda: legacy_model.token_loss_sum(legacy, batch)),
    ]


def time_interleaved(pair: list[Contender], steps: int, warmup: int) -> None:
    """Alternate single steps of the two, first one then the other leading, warm-up steps discarded."""
    for _ in range(warmup):
        for contender in pair:
            contender.step(keep=False)
    for round_ in range(steps):
        for contender in pair if round_ % 2 == 0 else reversed(pair):
            contender.step()


def speed_section(args) -> bool:
    usage = Usage()
    torch.set_num_threads(1)
    print(
        "a. training speed: 1 thread, fp32, forward + backward + AdamW step; the two networks take turns,\n"
        f"   medians over the timed steps after {args.warmup} warm-up each; CPU = this thread's CPU time"
    )
    header = (
        f"{'model':<13}{'params':>9}{'batch x seq':>13}  {'network':<14}{'wall ms':>9}{'CPU ms':>9}"
        f"{'fwd/bwd/opt CPU ms':>22}{'tokens/s (CPU)':>16}"
    )
    print(header)
    verdicts = []
    for shape in speed_shapes(args.quick):
        pair = contenders(shape)
        time_interleaved(pair, shape.steps, args.warmup)
        tokens = shape.batch * shape.spec.seq_len
        size = f"{shape.batch} x {shape.spec.seq_len}"
        for index, contender in enumerate(pair):
            lead = f"{shape.spec.name:<13}{shape.spec.parameters / 1e6:>8.2f}M{size:>13}" if index == 0 else " " * 35
            phases = "/".join(f"{1000 * contender.median(p):.1f}" for p in ("forward", "backward", "optimizer"))
            print(
                f"{lead}  {contender.name:<14}{1000 * contender.median('wall'):>9.1f}"
                f"{1000 * contender.median('cpu'):>9.1f}{phases:>22}{tokens / contender.median('cpu'):>16,.0f}"
            )
        new, old = pair
        cpu_ratio, wall_ratio = old.median("cpu") / new.median("cpu"), old.median("wall") / new.median("wall")
        met = cpu_ratio >= SPEED_GOAL
        verdicts.append(met)
        print(
            f"{'':<35}  {shape.steps} steps each; tokens/s transformers / legacy: {cpu_ratio:.3f} by CPU time, "
            f"{wall_ratio:.3f} by wall time; goal >= {SPEED_GOAL:.2f}: {'met' if met else 'MISSED'}"
        )
    print(f"   {usage.line()}")
    return all(verdicts)


def memory_config(quick: bool) -> dict:
    """A config big enough that full training's AdamW moments stand out of a rank's resident set."""
    if quick:
        return tiny_config(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4)
    return tiny_config(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
    )


@dataclass(frozen=True)
class MemoryRun:
    """One 2-rank job's outcome."""

    mode: str
    spec: ModelSpec
    rank_mib: list[float]
    usage: str


def memory_specs(config: dict, seq_len: int) -> dict[str, ModelSpec]:
    """Full and LoRA (default adapter) specs with the exact counts the platform plans with."""
    shape, lora = model_shape(config), lora_settings(None)
    trainable = shape.lora_parameters(int(lora["r"]), lora["target_modules"])
    return {
        "full": spec_from_config("bench-memory", config, seq_len, parameters=shape.parameters),
        LORA: spec_from_config(
            "bench-memory", config, seq_len, parameters=shape.parameters, trainable=trainable, mode=LORA
        ),
    }


def run_memory_job(workdir: Path, spec: ModelSpec, config: dict, args) -> MemoryRun:
    usage = Usage()
    model = {**spec.as_dict(), "config": config}
    if spec.mode == LORA:
        model["lora"] = lora_settings(None)
    launches = job_launches(
        [args.micro_batch] * 2,
        workdir / spec.mode,
        model=model,
        max_steps=args.memory_steps,
        checkpoint_every=0,
        checkpoint_dir=str(workdir / spec.mode / "checkpoints"),
    )
    job = LocalJob(launches, workdir / spec.mode)
    job.run(timeout=args.job_timeout)
    peaks = [max(event["memory_mb"] for event in metrics(job.events(rank)).values()) for rank in range(2)]
    return MemoryRun(spec.mode, spec, peaks, usage.line())


def memory_section(args) -> None:
    config = memory_config(args.quick)
    specs = memory_specs(config, args.seq_len)
    full, lora = specs["full"], lora_settings(None)
    print(
        f"b. memory per rank: 2-rank job (gloo, ZeRO 0, fp32, 1 thread per rank), micro-batch {args.micro_batch}, "
        f"seq {args.seq_len}, {args.memory_steps} steps;\n   config hidden {full.hidden_size} x {full.num_layers} "
        f"layers, vocab {full.vocab_size}, {full.parameters / 1e6:.1f} M parameters trained from scratch; "
        f"LoRA r {lora['r']} on {', '.join(lora['target_modules'])}"
    )
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        for spec in specs.values():
            runs.append(run_memory_job(Path(tmp), spec, config, args))
    print(
        f"{'mode':<6}{'trainable':>14}{'rank 0 MiB':>12}{'rank 1 MiB':>12}"
        f"{'fp32 state 4N+8T MiB':>23}{'planner rank_bytes MiB':>24}"
    )
    for run in runs:
        state = (4 * run.spec.parameters + 8 * run.spec.trainable) / MIB
        planned = rank_bytes(run.spec, 0, 2, args.micro_batch) / MIB
        print(
            f"{run.mode:<6}{run.spec.trainable:>14,}{run.rank_mib[0]:>12,.0f}{run.rank_mib[1]:>12,.0f}"
            f"{state:>23,.0f}{planned:>24,.0f}"
        )
    full_run, lora_run = runs
    saved = [f - lo for f, lo in zip(full_run.rank_mib, lora_run.rank_mib, strict=True)]
    state_saved = 8 * (full_run.spec.trainable - lora_run.spec.trainable) / MIB
    planned_saved = (
        rank_bytes(full_run.spec, 0, 2, args.micro_batch) - rank_bytes(lora_run.spec, 0, 2, args.micro_batch)
    ) / MIB
    print(f"{'full - lora':<20}{saved[0]:>12,.0f}{saved[1]:>12,.0f}{state_saved:>23,.0f}{planned_saved:>24,.0f}")
    for run in runs:
        print(f"   {run.mode} job: {run.usage}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and smaller shapes (about a minute)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the speed goal is missed")
    args = parser.parse_args()
    args.warmup = 2 if args.quick else 3
    args.micro_batch, args.seq_len = 2, (64 if args.quick else 128)
    args.memory_steps, args.job_timeout = (2 if args.quick else 4), 300
    usage = Usage()
    met = speed_section(args)
    print()
    memory_section(args)
    print(f"\ntotal: {usage.line()}")
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
