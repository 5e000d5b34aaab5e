"""Plans across stacks: islands, the sync mode and H, and the bridge's cost in the estimate."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kernel.modelspecs import resolve_model
from kernel.planner import InvalidRequest, NodeOffer, Plan, PlanRequest, catalog_chips, plan
from kernel.planner.islands import DILOCO_SHARE, STEP_SHARE, bridge_for, link_of

CHIPS = catalog_chips()
DEMO = ("rtx-4090", "tpu-v5e", "ascend-910b")
ONE_OF_EACH = dict.fromkeys(DEMO, 1)


def offers(*slugs: str, simulated: bool = True, free: int = 4, bridge_gbps: float = 0.0) -> list[NodeOffer]:
    return [
        NodeOffer(str(n), f"{slug}-host", slug, free, pool=f"{slug}-pool", simulated=simulated, bridge_gbps=bridge_gbps)
        for n, slug in enumerate(slugs, start=len(slugs) * int(not simulated))
    ]


def quote(model: str = "llama-tiny", fleet=None, **fields) -> Plan:
    fields.setdefault("chip_counts", ONE_OF_EACH)
    fields.setdefault("per_device_batch_size", 2)
    request = PlanRequest(model=resolve_model(model), max_steps=100, islands=True, policy="fastest", **fields)
    return plan(request, CHIPS, fleet or offers(*DEMO))


def test_the_demo_fleets_three_stacks_train_as_three_islands():
    quoted = quote()
    islands = quoted.islands()
    assert {island["island"] for island in islands} == {"cuda-simulated", "xla-simulated", "cann-simulated"}
    assert [island["index"] for island in islands] == [0, 1, 2]
    assert sorted(rank for island in islands for rank in island["ranks"]) == list(range(quoted.world_size))
    assert sum(island["batch"] for island in islands) == quoted.global_batch
    assert quoted.to_dict()["islands"] == [
        {**island, "tokens_per_s": round(island["tokens_per_s"], 3)} for island in islands
    ]


def test_a_long_step_on_a_fast_bridge_syncs_every_step_exactly():
    quoted = quote(
        "llama-2-7b",
        fleet=offers(*DEMO, free=8, bridge_gbps=400),
        chip_counts=dict.fromkeys(DEMO, 4),
        per_device_batch_size=8,
    )
    sync = quoted.to_dict()["sync"]
    assert sync["mode"] == "step" and sync["sync_every"] == 1 and sync["exact"] is True
    assert quoted.bridge.seconds_per_sync <= STEP_SHARE * (quoted.step_seconds - quoted.bridge.seconds_per_step)


def test_a_tiny_model_steps_too_fast_for_any_bridge_so_it_syncs_every_h_steps():
    quoted = quote(fleet=offers(*DEMO, bridge_gbps=10))
    assert quoted.bridge.mode == "diloco" and quoted.bridge.sync_every > 2
    assert quoted.bridge.source == "declared"


def test_a_big_model_on_a_slow_bridge_takes_h_inner_steps_and_says_it_is_not_one_world():
    quoted = quote("llama-2-7b", fleet=offers(*DEMO, free=8, bridge_gbps=1), chip_counts=dict.fromkeys(DEMO, 4))
    bridge = quoted.bridge
    assert bridge.mode == "diloco" and bridge.sync_every >= 2
    inner = quoted.step_seconds  # the islands' own step: each sync crosses during the next H steps, hidden
    assert bridge.exposed_per_step(inner) == 0
    assert bridge.seconds_per_sync <= DILOCO_SHARE * inner * bridge.sync_every * 1.0001
    assert bridge.seconds_per_sync > DILOCO_SHARE * inner * (bridge.sync_every - 1)  # the fewest such H
    assert quoted.to_dict()["sync"]["exact"] is False
    assert quoted.tokens_per_s == pytest.approx(quoted.global_batch * 4096 / quoted.step_seconds, rel=1e-6)


def test_a_diloco_sync_longer_than_its_h_steps_adds_what_they_cannot_hide_to_each_step():
    spec = {"model": "llama-2-7b", "fleet": offers(*DEMO, free=8, bridge_gbps=1), "chip_counts": dict.fromkeys(DEMO, 4)}
    hidden = quote(**spec)
    pinned = quote(**spec, sync_mode="diloco", sync_every=2)
    inner = hidden.step_seconds  # the same islands, the same batches: the same step of their own
    assert pinned.bridge.seconds_per_sync > 2 * inner  # two steps can't hide this sync
    exposed = (pinned.bridge.seconds_per_sync - 2 * inner) / 2
    assert pinned.bridge.exposed_per_step(inner) == pytest.approx(exposed)
    assert pinned.step_seconds == pytest.approx(inner + exposed, rel=1e-9)
    assert pinned.tokens_per_s < hidden.tokens_per_s


def test_a_step_mode_sync_is_waited_for_every_step():
    bridge = bridge_for(3, 1_000_000, step_seconds=1.0, gbps=1.0)
    assert bridge.mode == "step" and bridge.exposed_per_step(1.0) == bridge.seconds_per_sync


def test_the_bridge_sends_each_islands_float32_gradient_through_a_ring():
    bridge = bridge_for(3, 1_000_000, step_seconds=1.0, gbps=1.0)
    assert bridge.bytes_per_sync == int(4 * 1_000_000 * 2 * 2 / 3)
    assert bridge.seconds_per_sync == pytest.approx(bridge.bytes_per_sync * 8 / 1e9)
    assert bridge.mode == "step"  # 21 ms of a 1 s step
    slow = bridge_for(3, 1_000_000_000, step_seconds=1.0, gbps=1.0)
    assert slow.mode == "diloco" and slow.sync_every == math.ceil(slow.seconds_per_sync / 0.1)
    assert slow.bytes_per_step == pytest.approx(slow.bytes_per_sync / slow.sync_every)


def test_the_job_may_choose_the_mode_and_h():
    assert quote(sync_mode="diloco", sync_every=7).bridge.sync_every == 7
    big = quote("llama-2-7b", fleet=offers(*DEMO, free=8), chip_counts=dict.fromkeys(DEMO, 4), sync_mode="step")
    assert big.bridge.mode == "step"


def test_h_without_diloco_and_an_unknown_mode_are_refused_by_name():
    with pytest.raises(InvalidRequest, match="sync_every applies to the diloco sync mode only"):
        quote(sync_every=5)
    with pytest.raises(InvalidRequest, match="Unknown sync_mode 'gossip'"):
        quote(sync_mode="gossip")


def test_with_islands_real_and_simulated_chips_may_train_together_as_two_islands():
    fleet = offers("rtx-4090", simulated=False, free=1) + offers("rtx-4090", free=4)
    quoted = quote(fleet=fleet, chip_counts={"rtx-4090": 5})
    assert {island["island"] for island in quoted.islands()} == {"cuda", "cuda-simulated"}
    assert quoted.bridge is not None


def test_without_islands_one_stack_plans_stay_one_world_and_carry_no_bridge():
    request = PlanRequest(model=resolve_model("llama-tiny"), per_device_batch_size=2, max_steps=100)
    quoted = plan(request, CHIPS, offers(*DEMO))
    assert quoted.bridge is None and quoted.to_dict()["sync"] is None
    assert len(quoted.islands()) == len({rank.island for rank in quoted.ranks})


def test_a_measured_bridge_beats_the_declared_one_and_changes_the_mode():
    # The operator declared a slow link; the island leaders measured a fast one on every node.
    big = {"model": "llama-2-7b", "chip_counts": dict.fromkeys(DEMO, 4), "per_device_batch_size": 8}
    declared = quote(**big, fleet=offers(*DEMO, free=8, bridge_gbps=1))
    assert (declared.bridge.mode, declared.bridge.source) == ("diloco", "declared")
    fast = [replace(offer, bridge_gbps=400.0, bridge_measured=True) for offer in offers(*DEMO, free=8, bridge_gbps=1)]
    measured = quote(**big, fleet=fast)
    assert (measured.bridge.gbps, measured.bridge.source, measured.bridge.mode) == (400.0, "measured", "step")
    assert measured.to_dict()["sync"]["bridge_source"] == "measured"


def test_a_measured_bridge_slower_than_declared_raises_h():
    big = {"model": "llama-2-7b", "chip_counts": dict.fromkeys(DEMO, 4), "per_device_batch_size": 8}
    declared = quote(**big, fleet=offers(*DEMO, free=8, bridge_gbps=2))
    slow = [replace(offer, bridge_gbps=0.5, bridge_measured=True) for offer in offers(*DEMO, free=8, bridge_gbps=2)]
    measured = quote(**big, fleet=slow)
    assert measured.bridge.source == "measured" and measured.bridge.gbps == 0.5
    assert measured.bridge.mode == declared.bridge.mode == "diloco"
    assert measured.bridge.sync_every > declared.bridge.sync_every


def test_per_pool_a_measurement_replaces_the_declaration_and_a_slower_pool_still_counts():
    # rtx-4090 pool: one node measured 40 Gbit/s, another only declares 1; tpu pool declares 5: 5, declared.
    fleet = [
        NodeOffer("1", "a", "rtx-4090", 4, pool="gpu", simulated=True, bridge_gbps=40, bridge_measured=True),
        NodeOffer("2", "b", "rtx-4090", 4, pool="gpu", simulated=True, bridge_gbps=1),
        NodeOffer("3", "c", "tpu-v5e", 4, pool="tpu", simulated=True, bridge_gbps=5),
    ]
    assert link_of(fleet) == (5, "declared")
    assert link_of(fleet[:2]) == (40, "measured")
    assert link_of([]) == (0.0, "")
    assert quote(fleet=offers(*DEMO)).bridge.source == "default"


def test_the_bridge_round_trips_with_its_source_and_old_plans_still_load():
    quoted = quote(fleet=offers(*DEMO, bridge_gbps=10))
    data = quoted.to_dict()
    again = Plan.from_dict(data).bridge
    assert again.source == "declared" and again.to_dict() == data["sync"]
    old = {**data, "sync": {key: value for key, value in data["sync"].items() if key != "bridge_source"}}
    assert replace(Plan.from_dict(old).bridge, source="declared") == again  # a plan from before: source ""
