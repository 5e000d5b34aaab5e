"""Enrollment: the node token is obtained once, kept 0600, reused, and renewed after a 401."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import pytest

from kernel.protocol import AGENT_STATE_FILE, ReportKind
from tests.support.agents import FAKE_RANK, launch, wait_for
from tests.support.fake_platform import ENROLLMENT_TOKEN


def test_enrolls_once_and_persists_the_token(platform, start_agent, agent_config):
    running = start_agent(spot=True, address="10.0.0.7")
    wait_for(lambda: len(platform.polls) >= 1, what="first poll")
    running.stop()

    [body] = platform.enrollments
    assert body["enrollment_token"] == ENROLLMENT_TOKEN
    assert body["hostname"] == "node-a"
    assert (body["chip_type"], body["chips"], body["simulated"]) == ("rtx-4090", 2, True)
    assert [d["index"] for d in body["devices"]] == [0, 1]
    assert body["devices"][0]["memory_gib"] == 24
    assert (body["spot_eligible"], body["address"]) == (True, "10.0.0.7")
    assert body["agent_version"]

    path = agent_config.data_dir / AGENT_STATE_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved["node_token"] in platform.tokens
    poll = platform.polls[0]
    assert poll["health"]["chips"] == 2 and poll["health"]["simulated"] is True
    assert poll["ranks"] == [] and poll["acks"] == []


def test_restart_reuses_the_saved_token(platform, start_agent):
    first = start_agent()
    wait_for(lambda: platform.polls, what="first poll")
    first.stop()
    polls = len(platform.polls)

    second = start_agent()
    wait_for(lambda: len(platform.polls) > polls, what="poll after restart")
    second.stop()
    assert len(platform.enrollments) == 1


def test_a_changed_host_re_enrolls_with_its_node_token_not_the_enrollment_token(platform, start_agent, agent_config):
    first = start_agent(simulate="rtx-4090:2")
    wait_for(lambda: platform.polls, what="first poll")
    first.stop()
    old = json.loads((agent_config.data_dir / AGENT_STATE_FILE).read_text())["node_token"]

    second = start_agent(simulate="rtx-4090:1", enrollment_token=None)  # a chip was removed
    wait_for(lambda: len(platform.enrollments) == 2, what="the re-enrollment")
    polls = len(platform.polls)
    wait_for(lambda: len(platform.polls) > polls, what="a poll with the renewed token")
    second.stop()
    renewal = platform.enrollments[1]
    assert renewal["node_token"] == old and "enrollment_token" not in renewal and renewal["chips"] == 1
    saved = json.loads((agent_config.data_dir / AGENT_STATE_FILE).read_text())
    assert saved["node_token"] != old and saved["node_token"] in platform.tokens


def test_enrolls_again_when_the_token_is_refused(platform, start_agent, agent_config):
    running = start_agent()
    wait_for(lambda: platform.polls, what="first poll")
    old = next(iter(platform.tokens))
    platform.revoke(old)
    platform.release()
    wait_for(lambda: len(platform.enrollments) == 2, what="second enrollment")
    polls = len(platform.polls)
    wait_for(lambda: len(platform.polls) > polls, what="poll with the new token")
    running.stop()
    saved = json.loads((agent_config.data_dir / AGENT_STATE_FILE).read_text())
    assert saved["node_token"] != old and saved["node_token"] in platform.tokens


def test_cli_with_environment_variables(platform, tmp_path):
    """`python -m hosts.agent --once`: enroll, one poll (nothing to do), exit 0."""
    env = dict(
        os.environ,
        STARVERSE_PLATFORM_URL=platform.url,
        STARVERSE_ENROLLMENT_TOKEN=ENROLLMENT_TOKEN,
        STARVERSE_AGENT_DATA_DIR=str(tmp_path / "cli"),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hosts.agent",
            "--simulate",
            "tpu-v5e:4",
            "--hostname",
            "cli-node",
            "--once",
            "--poll-wait",
            "0.5",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [body] = platform.enrollments
    assert (body["hostname"], body["chip_type"], body["chips"]) == ("cli-node", "tpu-v5e", 4)
    assert (tmp_path / "cli" / AGENT_STATE_FILE).exists()


def test_cli_refuses_to_start_without_a_token(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hosts.agent",
            "--platform",
            "http://127.0.0.1:9",
            "--simulate",
            "mlu370:1",
            "--data-dir",
            str(tmp_path),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("STARVERSE_")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "enrollment-token" in done.stderr


def test_cli_runs_ranks_and_ends_them_on_sigterm(platform, tmp_path):
    """The real entry point, with the rank module from STARVERSE_RANK_MODULE; SIGTERM ends it cleanly."""
    env = dict(os.environ, STARVERSE_RANK_MODULE=FAKE_RANK, STARVERSE_ENROLLMENT_TOKEN=ENROLLMENT_TOKEN)
    agent = subprocess.Popen(
        [sys.executable, "-m", "hosts.agent", "--platform", platform.url,
         "--simulate", "rtx-4090:1", "--data-dir", str(tmp_path), "--poll-wait", "5"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        platform.send("start", 9, 1, {"ranks": [launch(job_id=9, steps=-1)]})
        wait_for(lambda: platform.items(ReportKind.METRIC), what="metrics from the CLI agent's rank")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0, agent.stderr.read()
    finally:
        agent.kill()
    [exit_item] = platform.items(ReportKind.EXIT)
    assert exit_item["code"] == -signal.SIGTERM
    assert (tmp_path / "runs" / "job-9-epoch-1" / "rank-0" / "env.json").exists()
    pid = [r["pid"] for poll in platform.polls for r in poll["ranks"]][-1]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_cli_once_runs_what_the_first_poll_brings_then_exits(platform, tmp_path):
    command_id = platform.send("start", 8, 1, {"ranks": [launch(job_id=8, steps=3)]})
    token_file = tmp_path / "token"
    token_file.write_text(ENROLLMENT_TOKEN)
    token_file.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "hosts.agent", "--platform", platform.url, "--enrollment-token-file",
         str(token_file), "--simulate", "rtx-4090:1", "--data-dir", str(tmp_path / "agent"), "--once",
         "--rank-module", FAKE_RANK],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [item["code"] for item in platform.items(ReportKind.EXIT)] == [0]
    assert len(platform.items(ReportKind.METRIC)) == 3
    assert platform.acks == {command_id: None}
