"""bench/islands.py's model, plan and runs: the three demo islands, their pacing, and the jobs it times.

Alone, flat and island runs of real rank processes (hosts/runtime/local.py), each island in a network
namespace of its own when bench/islands_net.py can make them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import islands_net  # noqa: E402
from hosts.runtime.local import (  # noqa: E402
    REPO,
    Lighthouse,
    LocalJob,
    island_launches,
    job_launches,
    metrics,
    private_file,
)
from kernel.catalog import CHIP_TYPES  # noqa: E402
from kernel.modelspecs import ModelSpec, spec_from_config  # noqa: E402

# The demo fleet's three stacks: (chip slug, stack, label).
ISLANDS = [("rtx-4090", "cuda", "RTX 4090"), ("tpu-v5e", "xla", "TPU v5e"), ("ascend-910b", "cann", "Ascend 910B")]
BIG = {"vocab": 32000, "hidden": 768, "layers": 12, "heads": 12, "ffn": 2048, "seq_len": 64}
QUICK = {"vocab": 4096, "hidden": 256, "layers": 4, "heads": 4, "ffn": 688, "seq_len": 64}
RUN_TIMEOUT_S = 900


def model_for(sizes: dict) -> tuple[dict, ModelSpec]:
    """A launch's model dict (ModelSpec.as_dict() + the Hugging Face config) for a Llama of these sizes."""
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": sizes["vocab"],
        "hidden_size": sizes["hidden"],
        "num_hidden_layers": sizes["layers"],
        "num_attention_heads": sizes["heads"],
        "num_key_value_heads": sizes["heads"],
        "intermediate_size": sizes["ffn"],
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }
    spec = spec_from_config("bench-llama", config, sizes["seq_len"])
    millions = round(spec.parameters / 1e6)
    spec = spec_from_config(f"llama-{millions}m", config, sizes["seq_len"])
    return {**spec.as_dict(), "config": config}, spec


def modelled_tokens_per_s(slug: str, spec: ModelSpec) -> float:
    """The planner's FLOPs model (kernel/planner/throughput.py): MFU x bf16 TFLOPS / training FLOPs per token."""
    row = next(row for row in CHIP_TYPES if row[0] == slug)
    return float(row[8]) * float(row[5]) * 1e12 / spec.training_flops_per_token


@dataclass
class Plan:
    """Micro-batch and paced speed of each island."""

    micro: list[int]
    real_tokens_per_s: list[float]  # the chips' modelled speed
    paced: list[float]  # what the simulated ranks are paced to
    slowdown: float
    seq_len: int

    def step_s(self, index: int) -> float:
        return self.micro[index] * self.seq_len / self.paced[index]


def make_plan(spec: ModelSpec, base_micro: int, step_s: float) -> Plan:
    speeds = [modelled_tokens_per_s(slug, spec) for slug, _, _ in ISLANDS]
    slowest = min(speeds)
    micro = [max(1, round(base_micro * speed / slowest)) for speed in speeds]
    slowdown = slowest * step_s / (base_micro * spec.seq_len)
    return Plan(micro, speeds, [speed / slowdown for speed in speeds], slowdown, spec.seq_len)


# ---------------------------------------------------------------- running jobs


class NamespacedJob(LocalJob):
    """LocalJob whose launch i runs inside network namespace `namespaces[i]` (None: this one)."""

    def __init__(self, launches, workdir: Path, namespaces: list[str | None], env: dict[str, str] | None = None):
        super().__init__(launches, workdir, env)
        self.namespaces = namespaces

    def _spawn(self, index, launch):
        config = self.workdir / f"launch-{index}.json"
        with private_file(config) as handle:
            handle.write(json.dumps(dataclasses.asdict(launch)))
        env = {**os.environ, **self._dist_env(launch), **self.env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        namespace = self.namespaces[index]
        if namespace:
            env["GLOO_SOCKET_IFNAME"] = islands_net.NS_INTERFACE  # gloo across listens where the others reach it
        out, err = private_file(self.stdout_path(index)), private_file(self.stderr_path(index))
        cmd = [sys.executable, "-m", "hosts.runtime", "--config", str(config)]
        if namespace:
            cmd = ["ip", "netns", "exec", namespace, *cmd]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        out.close()
        err.close()
        return proc


class BridgeLighthouse(Lighthouse):
    """torchft's Lighthouse bound to the namespaces' bridge address (local.Lighthouse binds 127.0.0.1)."""

    def __init__(self, workdir: Path, host: str, join_timeout_ms: int = 2000, heartbeat_timeout_ms: int = 2000):
        super().__init__(workdir, join_timeout_ms, heartbeat_timeout_ms)
        self.host = host
        self.address = f"http://{host}:{self.port}"
        self.args = [arg if not arg.startswith("--bind=") else f"--bind={host}:{self.port}" for arg in self.args]

    def __enter__(self):
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = private_file(self.workdir / "lighthouse.log")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        import socket

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex((self.host, self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"torchft_lighthouse did not listen on {self.host}:{self.port}")


@dataclass
class Run:
    """One finished (or killed) job: every launch's metric events by step, and its island events."""

    name: str
    steps: list[dict[int, dict]]
    island_events: list[list[dict]]
    wire: list[tuple[int, int]] = field(default_factory=list)  # (sent, received) bytes per island
    seconds: float = 0.0
    killed_at: float | None = None


def wait_all(jobs: list[LocalJob], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for job in jobs:
        codes = job.wait(max(1.0, deadline - time.monotonic()))
        if any(codes):
            raise RuntimeError(f"ranks exited with {codes}:\n{job.stderr_tail()}")


def common_fields(args, root: Path, model: dict, steps: int) -> dict:
    return {
        "model": model,
        "max_steps": steps,
        "zero_stage": 0,
        "checkpoint_every": 0,
        "checkpoint_dir": str(root / "checkpoints"),
        "seed": args.seed,
    }


def run_alone(args, root: Path, model: dict, plan: Plan) -> Run:
    """Each island as its own one-rank job (no islands, no bridge), the three at once."""
    jobs = []
    started = time.monotonic()
    for index, (slug, _, _) in enumerate(ISLANDS):
        where = root / f"alone-{index}"
        (where / "run").mkdir(parents=True, exist_ok=True)
        launches = job_launches(
            [plan.micro[index]], where / "run", **common_fields(args, where, model, args.alone_steps)
        )
        launches[0].paced_tokens_per_s, launches[0].chip_type = plan.paced[index], slug
        jobs.append(LocalJob(launches, where / "ranks").start())
    try:
        wait_all(jobs, RUN_TIMEOUT_S)
    finally:
        for job in jobs:
            job.kill()
    return Run(
        "alone", [metrics(job.events(0)) for job in jobs], [[] for _ in jobs], seconds=time.monotonic() - started
    )


def run_flat(args, root: Path, model: dict, plan: Plan, steps: int) -> Run:
    """One DeepSpeed world of the three ranks with the same micro-batches: the loss to compare with."""
    (root / "run").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    job = LocalJob(job_launches(plan.micro, root / "run", **common_fields(args, root, model, steps)), root / "ranks")
    try:
        job.run(RUN_TIMEOUT_S)
    finally:
        job.kill()
    return Run("flat", [metrics(job.events(0))], [[]], seconds=time.monotonic() - started)


def run_islands(
    args,
    root: Path,
    model: dict,
    plan: Plan,
    mode: str,
    steps: int,
    net,
    rate: float | None,
    kill: tuple[int, int] | None = None,
) -> Run:
    """The three islands as one run; `kill` = (island, step): SIGKILL that island's rank once it reached the step."""
    (root / "run").mkdir(parents=True, exist_ok=True)
    spec = {
        "mode": mode,
        "sync_every": args.sync_every if mode == "diloco" else 1,
        "overlap": mode == "diloco" and not args.no_overlap,  # as the platform runs diloco
        "quorum_timeout_s": args.quorum_timeout,
        "start_timeout_s": 180.0,
    }
    if net is not None:
        net.throttle(rate)
        lighthouse = BridgeLighthouse(root / "lighthouse", net.address, args.join_timeout_ms, args.heartbeat_timeout_ms)
    else:
        lighthouse = Lighthouse(root / "lighthouse", args.join_timeout_ms, args.heartbeat_timeout_ms)
    with lighthouse:
        launches = island_launches(
            [[m] for m in plan.micro], root / "run", lighthouse.address, spec, **common_fields(args, root, model, steps)
        )
        for index, launch in enumerate(launches):  # one rank per island: launch i is island i's leader
            slug, stack, _ = ISLANDS[index]
            launch.island["stack"] = stack
            launch.chip_type = slug
            launch.paced_tokens_per_s = plan.paced[index]
            if net is not None:
                launch.island["address"] = net.members[index].address
        namespaces = [m.namespace for m in net.members] if net is not None else [None] * len(launches)
        before = net.counters() if net is not None else None
        job = NamespacedJob(launches, root / "ranks", namespaces)
        started, killed_at = time.monotonic(), None
        try:
            job.start()
            if kill is not None:
                victim, at = kill
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while max(metrics(job.events(victim)), default=0) < at:
                    if time.monotonic() > deadline or any(p.poll() is not None for p in job.procs):
                        raise RuntimeError(f"{mode} run did not reach step {at}:\n{job.stderr_tail()}")
                    time.sleep(0.05)
                os.killpg(job.procs[victim].pid, signal.SIGKILL)  # a reclaimed host: no notice
                killed_at = time.time()
            codes = job.wait(RUN_TIMEOUT_S)
        finally:
            job.kill()
        expected = [0] * len(launches)
        if kill is not None:
            expected[kill[0]] = -signal.SIGKILL
        if codes != expected:
            raise RuntimeError(f"{mode} island run exited with {codes}:\n{job.stderr_tail()}")
        seconds = time.monotonic() - started
        wire = []
        if net is not None:
            after = net.counters()
            wire = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]
    events = [job.events(index) for index in range(len(launches))]
    return Run(
        f"{mode}",
        [metrics(e) for e in events],
        [[x for x in e if x["event"] == "island"] for e in events],
        wire,
        seconds,
        killed_at,
    )
