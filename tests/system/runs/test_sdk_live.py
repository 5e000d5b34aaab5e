"""A real tiny job to the end through the SDK (the article's example) and through the CLI.

The whole platform runs: live server, a Celery worker with beat, and three simulated node agents
that train llama-tiny with the real runtime (tests/support/stack.py).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node
from tests.support.stack import REPO, platform_stack, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FLEET = [("sdk-rtx-4090", "rtx-4090"), ("sdk-tpu-v5e", "tpu-v5e"), ("sdk-ascend-910b", "ascend-910b")]
STEPS = 30


@pytest.fixture
def stack_with_agents(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    with platform_stack(live_server, settings, tmp_path) as stack:
        for hostname, chip in FLEET:
            stack.add_agent(hostname, chip)
        wait_until(
            lambda: Node.objects.filter(hostname__startswith="sdk-", agent_status=AgentStatus.ONLINE).count() == 3,
            60,
            "the agents to enroll",
            stack,
        )
        yield stack


@pytest.fixture
def configured(monkeypatch, live_server, token_for, alice, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", token_for(alice))


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_article_example_trains_llama_tiny_to_the_end(stack_with_agents, configured, alice, capsys):
    run = load_example("article_example").main(max_steps=STEPS, progress=True)

    assert run.status == "succeeded", f"{run.status}: {run.status_reason}\n{stack_with_agents.logs()}"
    assert run.step == STEPS
    assert run.loss < run.first_loss
    assert isinstance(run.cost, Decimal) and run.cost >= 0
    assert run.migrations == []
    printed = capsys.readouterr()
    assert "tokens/s" in printed.out and "ETA" in printed.out and "status=succeeded" in printed.out
    assert f"{STEPS}/{STEPS}" in printed.err  # the progress bar reached the end
    assert Job.objects.get(pk=run.id).owner == alice


def test_the_cli_runs_a_job_to_the_end_and_follows_its_logs(stack_with_agents, configured):
    starverse = str(Path(sys.executable).with_name("starverse"))
    env = dict(os.environ)

    done = subprocess.run(
        [starverse, "run", "--model", "llama-tiny", "--max-steps", str(STEPS), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )

    assert done.returncode == 0, done.stderr + stack_with_agents.logs()
    job = json.loads(done.stdout)
    assert job["status"] == JobStatus.SUCCEEDED and job["step"] == STEPS
    logs = subprocess.run(
        [starverse, "logs", "-f", str(job["id"])], capture_output=True, text=True, timeout=60, env=env
    )
    assert logs.returncode == 0
    assert "[rank 0]" in logs.stdout
