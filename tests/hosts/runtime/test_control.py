"""The agent's control.json requests reach every rank at the same step boundary."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hosts.runtime.local import metrics
from tests.support.ranks import JOB_TIMEOUT_S, start_job


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def write_control(run_dir: Path, **data) -> None:
    """As the agent does: write beside, then rename over."""
    tmp = run_dir / "control.json.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, run_dir / "control.json")


def test_checkpoint_and_stop_requests_are_honoured_by_all_ranks_at_the_same_step(tmp_path):
    run_dir = tmp_path / "run"
    # ZeRO 1 so every rank writes its own optimizer shard into each checkpoint; paced to
    # ~40 ms a step so requests land mid-run.
    job = start_job(tmp_path, [1, 1], zero_stage=1, max_steps=100_000, run_dir=run_dir, paced_tokens_per_s=1600.0)
    try:
        wait_for(lambda: max(metrics(job.events(0)), default=0) >= 3, what="step 3")
        write_control(run_dir, checkpoint=1, stop=False)
        saved = wait_for(lambda: [e for e in job.events(0) if e["event"] == "checkpoint"], what="checkpoint")
        write_control(run_dir, checkpoint=1, stop=True, export=False)
        assert job.wait(JOB_TIMEOUT_S) == [0, 0], job.stderr_tail()
    finally:
        job.kill()

    checkpoints = [e for e in job.events(0) if e["event"] == "checkpoint"]
    done = [next(e for e in job.events(rank) if e["event"] == "done") for rank in (0, 1)]
    asked_at = saved[0]["step"]
    stopped_at = done[0]["step"]
    # Each request acted on once: the checkpoint at one step, the stop (with its checkpoint) later.
    assert [e["step"] for e in checkpoints] == [asked_at, stopped_at] and asked_at < stopped_at
    assert [d["step"] for d in done] == [stopped_at, stopped_at] and all(d["stopped"] for d in done)
    for rank in (0, 1):
        assert max(metrics(job.events(rank))) == stopped_at
    for step in (asked_at, stopped_at):
        shards = sorted(p.name for p in (tmp_path / "checkpoints" / f"step-{step}" / "ds").glob("*optim_states.pt"))
        assert len(shards) == 2, shards  # both ranks saved at that very step
    # "export": false from rank 0 reached every rank: nobody gathered weights to export.
    assert not (tmp_path / "checkpoints" / f"step-{stopped_at}" / "model").exists()


def test_a_rank_that_fails_exits_non_zero_with_its_traceback(tmp_path):
    job = start_job(tmp_path, [2], dataset=str(tmp_path / "missing.jsonl"), max_steps=5)
    assert job.wait(JOB_TIMEOUT_S) == [1]
    stderr = job.stderr_path(0).read_text()
    assert "Traceback" in stderr and "DatasetError" in stderr and "does not exist" in stderr
    assert job.events(0) == []
