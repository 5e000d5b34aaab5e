"""Fixtures for the node agent tests: a fake platform, agents running in threads, launches.

No Django here: run with `pytest -p no:django -o addopts="" --confcutdir=tests/agent tests/agent`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from hosts.agent.loop import Agent, AgentConfig
from kernel.protocol import RankLaunch

from .fake_platform import ENROLLMENT_TOKEN, FakePlatform

FAKE_RANK = str(Path(__file__).with_name("fake_rank.py"))


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


@pytest.fixture
def platform():
    fake = FakePlatform()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def agent_config(platform, tmp_path) -> AgentConfig:
    return AgentConfig(
        platform=platform.url,
        enrollment_token=ENROLLMENT_TOKEN,
        hostname="node-a",
        data_dir=tmp_path / "agent",
        simulate="rtx-4090:2",
        poll_wait_s=1.0,
        rank_module=FAKE_RANK,
        report_interval_s=0.2,
        default_grace_s=5.0,
        term_wait_s=1.0,
    )


@pytest.fixture
def start_agent(platform, agent_config):
    running: list[RunningAgent] = []

    def start(**overrides) -> RunningAgent:
        handle = RunningAgent(Agent(dataclasses.replace(agent_config, **overrides)), platform)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        if handle.thread.is_alive():
            handle.stop()
