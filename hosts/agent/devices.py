"""What chips this host offers: real CUDA GPUs, or simulated chips that run on the CPU, and which
stacks' runtimes it has (kernel/stacks.py): the platform refuses real chips of a stack the host can't run.

CUDA is probed in a short-lived subprocess, not in the agent: importing torch costs seconds and
initialising CUDA in a long-lived agent would hold a context (and memory) on every GPU that the
training ranks need.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from kernel.catalog import CHIP_TYPES
from kernel.stacks import CUDA, STACKS, UnknownStack, missing_runtime, stack_of_chip


class DeviceError(RuntimeError):
    """The host's chips can't be determined (no GPUs and no --simulate, or an unknown GPU)."""


# Substring of the CUDA device name -> chip slug; checked in order, so more specific names first.
GPU_NAME_TO_SLUG = [("H100", "h100-80g"), ("A100", "a100-80g"), ("4090", "rtx-4090")]

_PROBE = (
    "import json, torch\n"
    "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
    "props = [torch.cuda.get_device_properties(i) for i in range(n)]\n"
    "print(json.dumps([{'index': i, 'name': p.name, 'memory_gib': round(p.total_memory / 2**30, 1)}"
    " for i, p in enumerate(props)]))\n"
)


@dataclass
class Inventory:
    """The chips section of the enrollment request."""

    chip_type: str
    chips: int
    simulated: bool
    devices: list[dict] = field(default_factory=list)
    runtimes: list[str] = field(default_factory=list)  # stacks this host can train on (kernel/stacks.py)

    def as_enrollment(self) -> dict:
        return {
            "chip_type": self.chip_type,
            "chips": self.chips,
            "simulated": self.simulated,
            "devices": self.devices,
            "runtimes": self.runtimes,
        }


def parse_simulate(spec: str) -> tuple[str, int]:
    """`rtx-4090:2` -> ("rtx-4090", 2); a bare slug means one chip."""
    slug, _, count = spec.partition(":")
    if not slug:
        raise DeviceError(f"--simulate wants CHIP:COUNT, got {spec!r}")
    try:
        chips = int(count) if count else 1
    except ValueError as exc:
        raise DeviceError(f"--simulate wants CHIP:COUNT, got {spec!r}") from exc
    if chips < 1:
        raise DeviceError(f"--simulate needs at least one chip, got {spec!r}")
    return slug, chips


def simulated_inventory(spec: str) -> Inventory:
    """COUNT CPU 'chips' that pretend to be CHIP (memory from the seed catalog when known)."""
    slug, chips = parse_simulate(spec)
    memory = {row[0]: row[4] for row in CHIP_TYPES}.get(slug, 0)
    devices = [{"index": i, "name": f"simulated {slug}", "memory_gib": memory} for i in range(chips)]
    return Inventory(chip_type=slug, chips=chips, simulated=True, devices=devices)


def probe_cuda(timeout_s: float = 120.0) -> list[dict]:
    """The host's CUDA GPUs as [{"index", "name", "memory_gib"}]; [] without torch or CUDA."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return []


def slug_for_gpu(name: str) -> str | None:
    for needle, slug in GPU_NAME_TO_SLUG:
        if needle in name:
            return slug
    return None


def cuda_inventory(devices: list[dict], chip_type: str | None) -> Inventory:
    """Real GPUs; every GPU must map to one chip slug unless --chip-type names it."""
    if not devices:
        raise DeviceError("no CUDA GPUs found; pass --simulate CHIP:COUNT to run simulated chips")
    if not chip_type:
        slugs = {slug_for_gpu(d["name"]) for d in devices}
        if None in slugs or len(slugs) != 1:
            names = sorted({d["name"] for d in devices})
            raise DeviceError(f"can't map GPUs {names} to one chip type; pass --chip-type SLUG")
        chip_type = slugs.pop()
    return Inventory(chip_type=chip_type, chips=len(devices), simulated=False, devices=devices)


def bridges_installed(find_spec=importlib.util.find_spec) -> list[str]:
    """The stacks whose torch bridge is installed here (torch_npu, torch_mlu, torch_xla), without importing them."""
    return [stack.name for stack in STACKS.values() if stack.bridge and find_spec(stack.bridge) is not None]


def detect(simulate: str | None, chip_type: str | None, probe=probe_cuda, bridges=bridges_installed) -> Inventory:
    """The inventory to enroll with: simulated when asked, else the CUDA GPUs.

    Real chips of another stack (--chip-type ascend-910b) need that stack's bridge here; without it the
    agent stops with the message the platform would answer, naming what to install. With it, the agent
    still can't count those chips (no test here has run them): it says so instead of guessing.
    """
    found = bridges()
    if simulate:
        inventory = simulated_inventory(simulate)
    else:
        stack = _stack(chip_type)
        if stack is not None and stack.name != CUDA.name:
            problem = missing_runtime(stack, 1, chip_type, found)
            raise DeviceError(problem or f"this agent can't count {stack.label} devices yet; only CUDA GPUs enroll")
        inventory = cuda_inventory(probe(), chip_type)
        found = [CUDA.name, *found]
    inventory.runtimes = found
    return inventory


def _stack(chip_type: str | None):
    if not chip_type:
        return None
    try:
        return stack_of_chip(chip_type)
    except UnknownStack:
        return None


def health(inventory: Inventory, running_ranks: int) -> dict:
    """Free-form numbers sent with every poll (the platform shows them; nothing depends on them)."""
    load1, _, _ = os.getloadavg()
    return {
        "cpu_load_1m": round(load1, 2),
        "cpu_count": os.cpu_count() or 1,
        "memory_free_mib": _memory_available_mib(),
        "chips": inventory.chips,
        "simulated": inventory.simulated,
        "ranks_running": running_ranks,
    }


def _memory_available_mib() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return -1
