"""The SDK's one-line account of a plan's islands (`print(cluster.plan)`): how they keep in step."""

from __future__ import annotations

from starverse.plans import describe_islands

ISLANDS = [{"island": "cuda-simulated"}, {"island": "xla-simulated"}]
BRIDGE = {"bridge_gbps": 1.0, "bridge_source": "default"}


def test_step_mode_is_said_to_be_exactly_one_world():
    line = describe_islands(ISLANDS, {"mode": "step", "sync_every": 1, "exact": True, **BRIDGE})
    assert line.startswith("2 (cuda-simulated, xla-simulated), gradients synced every step: exactly one world;")


def test_overlapped_diloco_says_its_syncs_overlap_the_next_steps():
    sync = {"mode": "diloco", "sync_every": 8, "exact": False, "overlapped": True, **BRIDGE}
    line = describe_islands(ISLANDS, sync)
    assert (
        "diloco, synced every 8 steps: close to one world, not exactly it (each sync overlaps the next steps)" in line
    )


def test_a_plan_from_before_overlap_was_said_reads_as_before():
    line = describe_islands(ISLANDS, {"mode": "diloco", "sync_every": 8, "exact": False, **BRIDGE})
    assert line.endswith("not exactly it; bridge 1.0 Gbit/s (default)")
