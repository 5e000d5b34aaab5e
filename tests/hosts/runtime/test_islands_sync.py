"""Islands keep in step across the bridge (torchft): real rank processes, a real Lighthouse, no Django.

`step` mode is one flat world: two or three islands of uneven size train to the same parameters as
one world whose ranks hold the same micro-batches in the same order. `diloco` with H = 1, outer
learning rate 1 and no momentum is `step` mode when the inner optimizer is linear (SGD); with
H > 1 the islands meet H times less often and send H times fewer bytes across.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hosts.runtime.local import Lighthouse, LocalJob, island_launches, job_launches, metrics
from kernel.modelspecs import resolve_model

pytestmark = pytest.mark.slow

TINY = resolve_model("llama-tiny").as_dict()
STEPS = 20
TIMEOUT_S = 240
SGD = {"optimizer": "sgd"}  # a linear update (with no clipping, below): DiLoCo(H=1) is exact
NO_CLIPPING = {"max_grad_norm": 0.0}


def _fields(root: Path, **fields) -> dict:
    run_dir = root / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    return {
        "model": TINY,
        "max_steps": STEPS,
        "zero_stage": 0,
        "checkpoint_every": 0,
        "checkpoint_dir": str(root / "checkpoints"),
        **fields,
    }, run_dir


def run_flat(root: Path, micro_batches: list[int], **fields) -> LocalJob:
    fields, run_dir = _fields(root, **fields)
    job = LocalJob(job_launches(micro_batches, run_dir, **fields), root / "ranks").start()
    assert job.wait(TIMEOUT_S) == [0] * len(micro_batches), job.stderr_tail()
    return job


def run_islands(root: Path, islands: list[list[int]], island: dict | None = None, **fields) -> LocalJob:
    fields, run_dir = _fields(root, **fields)
    with Lighthouse(root / "lighthouse") as lighthouse:
        job = LocalJob(island_launches(islands, run_dir, lighthouse.address, island, **fields), root / "ranks").start()
        codes = job.wait(TIMEOUT_S)
    assert codes == [0] * len(job.launches), job.stderr_tail()
    return job


def final_weights(root: Path) -> dict[str, torch.Tensor]:
    checkpoints = root / "checkpoints"
    latest = (checkpoints / "latest").read_text().strip()
    return load_file(checkpoints / latest / "model" / "model.safetensors")


def assert_same_parameters(got: dict, want: dict, rel: float = 1e-5) -> None:
    """The whole model within `rel` (the norm of the difference over the norm), and no tensor off by 10x that:
    float32 sums the islands' and the flat world's gradients in different orders, and Adam makes the
    rounding of a small tensor's gradients a little larger than the model's as a whole."""
    assert got.keys() == want.keys()
    gaps, norms = [], []
    for name, tensor in want.items():
        gaps.append((got[name].double() - tensor.double()).norm())
        norms.append(tensor.double().norm())
        assert gaps[-1] / norms[-1].clamp_min(1e-12) <= 10 * rel, (
            f"{name}: relative difference {gaps[-1] / norms[-1]:.2e}"
        )
    gap = torch.stack(gaps).norm() / torch.stack(norms).norm()
    assert gap <= rel, f"the parameters' relative difference {gap:.2e} > {rel:.0e}"


def island_events(job: LocalJob, index: int) -> list[dict]:
    return [event for event in job.events(index) if event["event"] == "island"]


@pytest.fixture(scope="module")
def flat_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("flat")
    return root, run_flat(root, [1, 2, 1, 2])


def test_step_mode_two_islands_train_to_one_flat_worlds_parameters(flat_world, tmp_path):
    flat_root, flat = flat_world
    job = run_islands(tmp_path, [[1, 2], [1, 2]])
    assert_same_parameters(final_weights(tmp_path), final_weights(flat_root))
    # Every rank of both islands reports the global loss of the whole batch, step by step.
    want = {step: event["loss"] for step, event in metrics(flat.events(0)).items()}
    for index in range(4):
        got = {step: event["loss"] for step, event in metrics(job.events(index)).items()}
        assert got.keys() == want.keys()
        assert all(got[step] == pytest.approx(want[step], rel=1e-5) for step in want)
    assert all(event["samples_seen"] == 6 * step for step, event in metrics(job.events(2)).items())


def test_step_mode_three_uneven_islands_train_to_one_flat_worlds_parameters(flat_world, tmp_path):
    flat_root, _ = flat_world
    job = run_islands(tmp_path, [[1, 2], [1], [2]])
    assert_same_parameters(final_weights(tmp_path), final_weights(flat_root))
    # One leader per island sends the gradient across at every step; the islands' other ranks don't.
    leaders = [0, 2, 3]
    for index in leaders:
        changes = [event["change"] for event in island_events(job, index)]
        assert changes == ["sync", "sync"]  # figures at steps 10 and 20; nobody joined, left or was dropped
        assert island_events(job, index)[-1]["syncs"] == STEPS
    done = [next(e for e in job.events(index) if e["event"] == "done") for index in range(4)]
    assert {event["step"] for event in done} == {STEPS}


def test_diloco_with_one_inner_step_no_momentum_and_outer_rate_one_is_step_mode(tmp_path):
    step = run_islands(tmp_path / "step", [[1, 2], [1]], extra=SGD, hyperparameters=NO_CLIPPING, learning_rate=0.05)
    diloco = run_islands(
        tmp_path / "diloco",
        [[1, 2], [1]],
        island={"mode": "diloco", "sync_every": 1, "outer_lr": 1.0, "outer_momentum": 0.0},
        extra=SGD,
        hyperparameters=NO_CLIPPING,
        learning_rate=0.05,
    )
    assert_same_parameters(final_weights(tmp_path / "diloco"), final_weights(tmp_path / "step"))
    syncs = island_events(diloco, 0)
    assert [event["step"] for event in syncs] == list(range(1, STEPS + 1))
    assert [event["step"] for event in island_events(step, 0)] == [10, 20]  # step mode: figures every 10 steps


def test_diloco_meets_every_h_steps_and_sends_h_times_fewer_bytes(tmp_path):
    every = 5
    job = run_islands(tmp_path, [[1], [2]], island={"mode": "diloco", "sync_every": every})
    syncs = [event for event in island_events(job, 0) if event["change"] == "sync"]
    assert [event["step"] for event in syncs] == [5, 10, 15, 20]
    assert [event["syncs"] for event in syncs] == [1, 2, 3, 4]
    parameters = sum(tensor.numel() for tensor in final_weights(tmp_path).values())
    # Two islands: each leader sends its whole float32 delta once per sync (a ring of two).
    assert syncs[-1]["bytes_across"] == 4 * parameters * 4
    # Between syncs each island trains on its own: its losses are its own batch's, not the others'.
    own = [metrics(job.events(index))[3]["loss"] for index in (0, 1)]
    assert own[0] != own[1]


def final_eval_loss(job: LocalJob) -> float:
    evals = [event for event in job.events(0) if event["event"] == "eval"]
    return evals[-1]["eval_loss"]


def test_diloco_on_the_demo_stacks_reaches_one_worlds_held_out_loss_within_two_percent(tmp_path):
    """Three islands as on the demo fleet (RTX 4090s, TPU v5e, Ascend 910B: micro-batches by speed), DiLoCo
    every 5 steps with its default outer step and overlapped syncs (each lands a round late, as the
    platform runs diloco), against one world on the same batches: equal tokens.

    "Within 2%" is the quality bar: no more than 2% above one world's held-out loss. Here DiLoCo's outer
    Nesterov momentum ends lower than one world's AdamW alone (2.589 against 2.684 when written), which
    is no loss of quality, so only the upper side is held to 2%."""
    steps, held_out = 60, {"eval_dataset": "synthetic", "max_steps": 60}
    flat = run_flat(tmp_path / "flat", [1, 2, 1], **held_out)
    diloco = run_islands(
        tmp_path / "diloco", [[1], [2], [1]], island={"mode": "diloco", "sync_every": 5, "overlap": True}, **held_out
    )
    one_world, islands = final_eval_loss(flat), final_eval_loss(diloco)
    assert (islands - one_world) / one_world <= 0.02, f"diloco {islands:.4f} vs one world {one_world:.4f}"
    # Overlapped: the round sent at step 5 crosses while the islands train to step 10, where it lands; the
    # last boundary lands the round from step 55 and then its own at once, so the run ends on global weights.
    syncs = [event for event in island_events(diloco, 0) if event["change"] == "sync"]
    assert [event["step"] for event in syncs] == [*range(10, steps + 1, 5), steps]
    assert [event["round_step"] for event in syncs] == list(range(5, steps + 1, 5))
    assert [event["syncs"] for event in syncs] == list(range(1, steps // 5 + 1))
    assert islands < 0.8 * first_step_loss(diloco)  # it trained: not equal by standing still
    assert max(metrics(diloco.events(0))) == steps


def first_step_loss(job: LocalJob) -> float:
    """The loss of the first step: where training started from."""
    return metrics(job.events(0))[1]["loss"]
