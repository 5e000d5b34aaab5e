"""Node agents for tests: a launch as the platform sends it, an agent in a thread, and waiting for a condition."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from hosts.agent.loop import Agent
from kernel.protocol import RankLaunch
from tests.support.fake_platform import FakePlatform

FAKE_RANK = str(Path(__file__).parent / "scripts" / "fake_rank.py")


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def launch(job_id: int = 1, epoch: int = 1, rank: int = 0, world_size: int = 1, **extra) -> dict:
    """A RankLaunch as the platform sends it; `extra` drives the fake rank."""
    return RankLaunch(
        job_id=job_id,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        master_addr="127.0.0.1",
        master_port=29500 + job_id,
        model={"name": "tiny"},
        dataset="synthetic",
        micro_batches=[4] * world_size,
        max_steps=10,
        zero_stage=0,
        run_dir="/platform/says/ignored",
        checkpoint_dir="/tmp/ckpt",
        extra=extra,
    ).as_dict()


class RunningAgent:
    """An Agent whose run() loop is in a background thread."""

    def __init__(self, agent: Agent, platform: FakePlatform) -> None:
        self.agent, self.platform, self.error = agent, platform, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.agent.run()
        except BaseException as exc:  # surfaced by the tests
            self.error = exc

    def stop(self) -> None:
        self.agent.stop()
        self.platform.release()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "agent did not stop"
