"""Shared by the whole-platform runs: the live platform with one simulated RTX 4090 agent, enrolled."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from fleet.choices import AgentStatus
from fleet.models import Node
from tests.support.stack import platform_stack, wait_until


@pytest.fixture
def stack_with_agent(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    with platform_stack(live_server, settings, tmp_path) as stack:
        stack.add_agent("run-rtx-4090", "rtx-4090")
        wait_until(
            lambda: Node.objects.filter(hostname="run-rtx-4090", agent_status=AgentStatus.ONLINE).exists(),
            60,
            "the agent to enroll",
            stack,
        )
        yield stack
