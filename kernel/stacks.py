"""The software stacks chips train on, and what a host needs to run each one.

An island of a run is the ranks of one stack (hosts/runtime/islands/): inside it one DeepSpeed world
on the stack's own collective library; between islands, torchft over TCP. A simulated chip counts as
its chip's stack (the demo fleet's RTX 4090s, TPU v5e and Ascend 910B are three islands) but trains
on the CPU with gloo, so simulated and real chips of one stack are two islands too.

A host runs a stack's real chips only with the stack's torch bridge installed. Its agent lists the
runtimes it found when it enrolls; the platform refuses real chips of a stack the host can't run,
naming what to install. `tested` says whether a run on that stack's real hardware has passed here:
none has yet. No GPU machine has been at hand (bench/cuda_runtime.py is the run that would set CUDA's);
CUDA is torch's own path (NCCL), the others are wired by their vendors' documented APIs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.catalog import CHIP_TYPES


@dataclass(frozen=True)
class Stack:
    name: str  # as the catalog's chip types name it
    label: str
    backend: str  # torch.distributed backend inside an island of real chips
    device_type: str  # torch device type of its chips ("cuda:0", "npu:0", ...)
    bridge: str | None  # the Python module a host needs besides torch (None: torch itself)
    install: str  # what to install, in the words a refusal uses
    tested: bool  # a run on this stack's real chips has passed in this project's tests


CUDA = Stack("cuda", "CUDA", "nccl", "cuda", None, "a CUDA build of torch and NVIDIA's driver", False)
CANN = Stack(
    "cann",
    "CANN",
    "hccl",
    "npu",
    "torch_npu",
    "Huawei's CANN toolkit and torch_npu (pip install torch-npu), with DeepSpeed's npu accelerator",
    False,
)
BANG = Stack("bang", "BANG", "cncl", "mlu", "torch_mlu", "Cambricon's Neuware toolkit and torch_mlu", False)
XLA = Stack("xla", "XLA", "xla", "xla", "torch_xla", "torch_xla (pip install torch-xla) with its TPU runtime", False)
STACKS = {stack.name: stack for stack in (CUDA, CANN, BANG, XLA)}

SIMULATED_BACKEND = "gloo"  # simulated chips of every stack: CPU ranks
CATALOG_STACKS = {row[0]: row[7] for row in CHIP_TYPES}  # chip slug -> stack name


class UnknownStack(ValueError):
    pass


def stack_named(name: str) -> Stack:
    try:
        return STACKS[name]
    except KeyError:
        raise UnknownStack(f"unknown software stack {name!r} (known: {', '.join(STACKS)})") from None


def stack_of_chip(slug: str, stack: str | None = None) -> Stack:
    """A chip type's stack: `stack` when given (the platform's record), else the seed catalog's."""
    name = stack or CATALOG_STACKS.get(slug)
    if name is None:
        raise UnknownStack(f"chip type {slug!r} has no known software stack")
    return stack_named(name)


def island_of(stack: str, simulated: bool) -> str:
    """The island a rank belongs to: its stack, with simulated chips apart ("cuda", "cuda-simulated")."""
    return f"{stack}-simulated" if simulated else stack


def backend_of(stack: str, simulated: bool) -> str:
    return SIMULATED_BACKEND if simulated else stack_named(stack).backend


def backend_for_device(device_type: str) -> str:
    """The collective library of a rank on a device of this type ("cuda", "npu", ...); gloo on the CPU."""
    return next((stack.backend for stack in STACKS.values() if stack.device_type == device_type), SIMULATED_BACKEND)


def missing_runtime(stack: Stack, chips: int, chip_type: str, runtimes: list[str]) -> str | None:
    """Why a host can't run `chips` real `chip_type` chips of `stack` (None: it can)."""
    if stack.name in runtimes:
        return None
    found = ", ".join(runtimes) or "none"
    return (
        f"This host declares {chips} real {chip_type} chip(s), which train on the {stack.label} stack, but it has "
        f"no {stack.label} runtime (runtimes found: {found}). Install {stack.install} on the host, then start "
        "the agent again."
    )
