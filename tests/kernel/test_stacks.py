"""The stack registry: which stack a chip trains on, which island its ranks join, what a host must install."""

from __future__ import annotations

import pytest

from hosts.agent.devices import DeviceError, detect
from kernel.stacks import STACKS, UnknownStack, backend_of, island_of, stack_of_chip


@pytest.mark.parametrize(
    ("chip", "stack"),
    [("rtx-4090", "cuda"), ("h100-80g", "cuda"), ("tpu-v5e", "xla"), ("ascend-910b", "cann"), ("mlu370", "bang")],
)
def test_every_catalog_chip_has_its_stack(chip, stack):
    assert stack_of_chip(chip).name == stack


def test_the_demo_fleets_chips_make_three_islands_and_real_chips_are_apart_from_simulated_ones():
    demo = {island_of(stack_of_chip(chip).name, simulated=True) for chip in ("rtx-4090", "tpu-v5e", "ascend-910b")}
    assert demo == {"cuda-simulated", "xla-simulated", "cann-simulated"}
    assert island_of("cuda", simulated=False) != island_of("cuda", simulated=True)


def test_real_chips_talk_over_their_vendors_library_and_simulated_ones_over_gloo():
    assert [backend_of(name, simulated=False) for name in ("cuda", "cann", "bang", "xla")] == [
        "nccl",
        "hccl",
        "cncl",
        "xla",
    ]
    assert {backend_of(name, simulated=True) for name in STACKS} == {"gloo"}


def test_no_stack_is_claimed_as_run_on_real_hardware_until_a_run_there_passed():
    assert [stack.name for stack in STACKS.values() if stack.tested] == []


def test_an_unknown_chip_is_a_clear_error():
    with pytest.raises(UnknownStack, match="no known software stack"):
        stack_of_chip("quantum-9000")


def test_an_agent_for_real_npus_without_torch_npu_stops_naming_what_to_install():
    with pytest.raises(DeviceError, match="torch_npu"):
        detect(None, "ascend-910b", probe=lambda: [], bridges=lambda: [])


def test_an_agent_lists_the_runtimes_it_found_when_it_enrolls():
    gpus = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 80}]
    inventory = detect(None, None, probe=lambda: gpus, bridges=lambda: ["xla"])
    assert inventory.as_enrollment()["runtimes"] == ["cuda", "xla"]
    assert detect("tpu-v5e:2", None, bridges=lambda: []).as_enrollment()["runtimes"] == []
