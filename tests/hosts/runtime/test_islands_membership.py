"""Islands leave and join a run in place: the others never stop (real ranks, a real Lighthouse).

An island killed with SIGKILL mid-run drops out of the quorum at the next sync; the survivors lose at
most the one step whose allreduce it broke, and train on to the end. An island started while a run
is going joins it: a healthy island hands it the live state (torchft's recovery), and from its first
step it trains in step with the others.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hosts.agent.ranks import update_control
from hosts.runtime.local import Lighthouse, LocalJob, island_launches, metrics

from .test_islands_sync import TINY

pytestmark = pytest.mark.slow

STEPS = 60
SEQ = TINY["seq_len"]
PACED = 6.4 * SEQ  # tokens/s: a one-sample step takes 0.16 s, long enough to act mid-run
QUORUM_TIMEOUT_S = 20.0
TIMEOUT_S = 240


def launches(root: Path, lighthouse: str, islands: list[list[int]], max_steps: int = STEPS, **island) -> list:
    run_dir = root / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"quorum_timeout_s": QUORUM_TIMEOUT_S, "start_timeout_s": 60.0, **island}
    return island_launches(
        islands,
        run_dir,
        lighthouse,
        spec,
        model=TINY,
        max_steps=max_steps,
        zero_stage=0,
        checkpoint_every=0,
        checkpoint_dir=str(root / "checkpoints"),
        paced_tokens_per_s=PACED,
    )


def wait_for_steps(job: LocalJob, index: int, reached: Callable[[dict[int, dict]], bool]) -> None:
    """Until the steps rank `index` has reported (its metrics by step) are `reached`."""
    deadline = time.monotonic() + TIMEOUT_S
    while not reached(metrics(job.events(index))):
        assert time.monotonic() < deadline, job.stderr_tail()
        assert all(proc.poll() is None for proc in job.procs), job.stderr_tail()
        time.sleep(0.1)


def island_events(job: LocalJob, index: int, change: str) -> list[dict]:
    return [e for e in job.events(index) if e["event"] == "island" and e["change"] == change]


def test_the_other_islands_go_on_when_one_is_killed(tmp_path):
    with Lighthouse(tmp_path / "lighthouse", join_timeout_ms=2000, heartbeat_timeout_ms=2000) as lighthouse:
        job = LocalJob(launches(tmp_path, lighthouse.address, [[1], [1], [1]]), tmp_path / "ranks").start()
        try:
            wait_for_steps(job, 2, lambda steps: max(steps, default=0) >= 10)
            os.killpg(job.procs[2].pid, signal.SIGKILL)  # island 2's only rank, as a reclaimed host would
            codes = job.wait(TIMEOUT_S)
        finally:
            job.kill()
    assert codes == [0, 0, -signal.SIGKILL], job.stderr_tail()
    for survivor in (0, 1):
        steps = metrics(job.events(survivor))
        assert sorted(steps) == list(range(1, STEPS + 1))  # every step trained, none skipped
        times = [steps[step]["t"] for step in sorted(steps)]
        pause = max(later - earlier for earlier, later in zip(times, times[1:], strict=False))
        slowest = max(event["step_time_s"] for event in steps.values())
        # The longest gap holds the dropped step (computed, then its allreduce waits out the quorum timeout)
        # and that step trained again: the timeout plus one step beyond the one the leaver broke.
        assert pause <= QUORUM_TIMEOUT_S + 2 * slowest, f"survivor {survivor} stood still {pause:.1f} s"
        assert len(island_events(job, survivor, "dropped")) <= 1  # at most the step the leaver broke
        assert island_events(job, survivor, "members")[-1]["members"] == [0, 1]
        # The data moved on by three islands' batches a step, then by two.
        assert steps[STEPS]["samples_seen"] < 3 * STEPS
        assert steps[STEPS]["samples_seen"] >= 2 * STEPS


def test_an_island_started_mid_run_joins_it_and_trains_in_step(tmp_path):
    # The run goes on until the newcomer has trained with it, then the agent's stop request ends every island at
    # one step: however long the newcomer takes to start on a busy machine, it starts mid-run.
    endless = 100_000
    with Lighthouse(tmp_path / "lighthouse", join_timeout_ms=2000, heartbeat_timeout_ms=2000) as lighthouse:
        first = launches(tmp_path, lighthouse.address, [[1], [1]], max_steps=endless)
        job = LocalJob(first, tmp_path / "ranks").start()
        newcomer = LocalJob([], tmp_path / "newcomer")
        try:
            wait_for_steps(job, 0, lambda steps: max(steps, default=0) >= 8)
            planned = launches(tmp_path, lighthouse.address, [[1], [1], [2]], max_steps=endless)  # ports free now
            newcomer = LocalJob([planned[2]], tmp_path / "newcomer").start()
            wait_for_steps(newcomer, 0, lambda steps: len(steps) >= 10)  # ten of its own (its first isn't 1)
            update_control(tmp_path / "run", stop=True)  # as the agent asks: every island stops at one step
            assert newcomer.wait(TIMEOUT_S) == [0], newcomer.stderr_tail()
            assert job.wait(TIMEOUT_S) == [0, 0], job.stderr_tail()
        finally:
            job.kill()
            newcomer.kill()
    joined = island_events(newcomer, 0, "joined")
    assert len(joined) == 1 and joined[0]["step"] >= 8
    theirs, ours = metrics(job.events(0)), metrics(newcomer.events(0))
    last = max(theirs)
    assert min(ours) == joined[0]["step"] + 1 and max(ours) == last  # one stop, at one step, for every island
    for step in ours:  # one run: the same global loss at every step the newcomer took part in
        assert ours[step]["loss"] == pytest.approx(theirs[step]["loss"], rel=1e-6)
    assert island_events(job, 0, "members")[-1]["members"] == [0, 1, 2]
    # From the newcomer's first step on, each step moves the data by all three islands' batches.
    assert theirs[last]["samples_seen"] - theirs[min(ours)]["samples_seen"] == 4 * (last - min(ours))
