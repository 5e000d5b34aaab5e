"""Process group and DeepSpeed engine for one rank.

Ranks are started directly with the torch.distributed environment (no `deepspeed` launcher:
it adds ~8 s per start). gloo on CPU with one torch thread per rank (several ranks share a
host's cores), NCCL on CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from hosts.runtime.hfmodel import ModelSource, build_model
from kernel.hyperparameters import Hyperparameters, learning_rate_at
from kernel.protocol import RankLaunch
from kernel.stacks import backend_for_device

DEFAULT_TIMEOUT_S = 1800
ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Placement:
    """Where this rank runs, as the environment and the launch file agree."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def check_launch(launch: RankLaunch) -> None:
    """Refuse a launch file that cannot train, before any collective can hang on it."""
    if len(launch.micro_batches) != launch.world_size:
        raise ValueError(f"micro_batches has {len(launch.micro_batches)} entries for world size {launch.world_size}")
    if min(launch.micro_batches) < 1:
        raise ValueError(f"every rank needs a micro-batch of at least 1 sample, got {launch.micro_batches}")
    if launch.zero_stage not in (0, 1, 2):
        raise ValueError(f"zero_stage must be 0, 1 or 2 (got {launch.zero_stage})")
    if not 0 <= launch.rank < launch.world_size:
        raise ValueError(f"rank {launch.rank} is outside world size {launch.world_size}")


def init_distributed(launch: RankLaunch) -> Placement:
    """Join the process group named by the environment, which must match the launch file."""
    missing = [key for key in ENV_KEYS if key not in os.environ]
    if missing:
        raise RuntimeError(f"missing torch.distributed environment: {', '.join(missing)}")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if (rank, world_size) != (launch.rank, launch.world_size):
        raise RuntimeError(f"environment says rank {rank}/{world_size}, launch file {launch.rank}/{launch.world_size}")
    device = torch.device(launch.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    timeout = timedelta(seconds=float(launch.extra.get("timeout_s", DEFAULT_TIMEOUT_S)))
    backend = backend_for_device(device.type)  # nccl on CUDA, the vendor's library on an NPU, gloo on the CPU
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout)
    return Placement(rank, world_size, device)


def deepspeed_config(launch: RankLaunch, placement: Placement, load_universal: bool = False) -> dict:
    """This rank's DeepSpeed config.

    Only the micro-batch is given (gradient_accumulation_steps 1, train_batch_size derived):
    DeepSpeed 0.19.8 asserts train_batch_size == micro × accumulation × world size, which an
    uneven mix cannot satisfy, and uses the derived value only for its own logging. The
    uneven split is handled by the loss scaling in `train.scaled_loss`.
    """
    config = {
        "train_micro_batch_size_per_gpu": launch.micro_batches[placement.rank],
        "gradient_accumulation_steps": 1,
        # Set explicitly: DeepSpeed changed its default in 0.19.3.
        "gradient_clipping": float(hyperparameters_of(launch).max_grad_norm),
        "zero_optimization": {"stage": launch.zero_stage},
        "bf16": {"enabled": placement.cuda},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if load_universal:
        config["checkpoint"] = {"load_universal": True}
    return config


def hyperparameters_of(launch: RankLaunch) -> Hyperparameters:
    """The launch's settings; a launch that names no rate or decay (tests, benchmarks) gets its
    `learning_rate` and a weight decay of 0.01."""
    hyperparameters = Hyperparameters.from_dict(launch.hyperparameters)
    return replace(
        hyperparameters,
        learning_rate=launch.learning_rate if hyperparameters.learning_rate is None else hyperparameters.learning_rate,
        weight_decay=0.01 if hyperparameters.weight_decay is None else hyperparameters.weight_decay,
    )


def make_optimizer(model: torch.nn.Module, launch: RankLaunch) -> torch.optim.Optimizer:
    """torch's AdamW, handed to DeepSpeed.

    DeepSpeed's own Adam on CPU is a C++ op JIT-compiled on first use (about a minute per host,
    and it needs a compiler there); torch's AdamW is the same update with nothing to build.
    """
    settings = hyperparameters_of(launch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if launch.extra.get("optimizer", "adamw") == "sgd":  # plain SGD: a linear update, for exactness tests
        return torch.optim.SGD(trainable, lr=settings.learning_rate)
    return torch.optim.AdamW(
        trainable,  # LoRA: the adapter only
        lr=settings.learning_rate,
        betas=(settings.adam_beta1, settings.adam_beta2),
        eps=settings.adam_epsilon,
        weight_decay=settings.weight_decay,
    )


class StepSchedule:
    """The rate at each step as `kernel.hyperparameters.learning_rate_at` gives it, set on the optimizer.

    A torch LambdaLR handed to DeepSpeed, which steps it after every optimizer step and keeps its
    state in each checkpoint; `align` also sets it from the step a rank resumed or healed at, so a
    run that moved, resumed or joined uses exactly the uninterrupted run's rate at every step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, launch: RankLaunch) -> None:
        self.settings, self.total = hyperparameters_of(launch), launch.max_steps
        peak = self.settings.learning_rate or 1.0
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: learning_rate_at(self.settings, step, self.total) / peak
        )

    def align(self, step: int) -> float:
        """Make `step` the next one: its rate on every parameter group; returns the rate."""
        rate = learning_rate_at(self.settings, step, self.total)
        self.scheduler.last_epoch = step
        for group in self.scheduler.optimizer.param_groups:
            group["lr"] = rate
        self.scheduler._last_lr = [rate for _ in self.scheduler.optimizer.param_groups]
        return rate


def build_engine(launch: RankLaunch, source: ModelSource, placement: Placement, load_universal: bool = False):
    """deepspeed.initialize over the already-joined process group; returns the engine."""
    import deepspeed

    if not placement.cuda and not launch.extra.get("shm_comm", False):
        _skip_shm_comm_op()
    model = build_model(source, launch.seed).to(placement.device)
    optimizer = make_optimizer(model, launch)
    schedule = StepSchedule(optimizer, launch)
    config = deepspeed_config(launch, placement, load_universal)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=schedule.scheduler, config=config, dist_init_required=False
    )
    engine.step_schedule = schedule  # the trainer aligns it after a resume or a heal
    return engine


def _skip_shm_comm_op() -> None:
    """Keep DeepSpeed from JIT-compiling its shared-memory all-reduce on CPU hosts.

    DeepSpeed's CPU comm backend builds that op on every host (about 40 s with a C++ compiler,
    a crash without one), yet only its inference all-reduce uses it; training goes through
    gloo. DeepSpeed caches op compatibility in a module-level dict that it documents as
    editable, so marking the op incompatible there makes it fall back to plain gloo.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
