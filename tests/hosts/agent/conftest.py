"""Fixtures for the node agent tests: a fake platform, agents running in threads
(helpers: tests/support/agents.py).

No Django here: run with `pytest -p no:django -o addopts="" --confcutdir=tests/hosts/agent tests/hosts/agent`.
"""

from __future__ import annotations

import dataclasses

import pytest

from hosts.agent.loop import Agent, AgentConfig
from tests.support.agents import FAKE_RANK, RunningAgent
from tests.support.fake_platform import ENROLLMENT_TOKEN, FakePlatform


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
