"""The agent survives the platform going away and doesn't hammer it while it is there."""

from __future__ import annotations

import time

from kernel.protocol import ReportKind
from tests.support.agents import launch, wait_for


def test_keeps_running_through_a_platform_restart(platform, start_agent):
    running = start_agent()
    platform.send("start", 1, 1, {"ranks": [launch(steps=20, step_s=0.05, exit_code=1, stderr=["died"])]})
    wait_for(lambda: platform.items(ReportKind.METRIC), what="first metric")
    platform.stop()
    wait_for(lambda: running.agent.ranks.running() == 0, what="the rank to finish during the outage")
    time.sleep(1.0)  # the reporter and the poller fail a few times meanwhile
    assert not platform.items(ReportKind.EXIT)
    polls = len(platform.polls)

    platform.start()  # same port, same tokens: a restarted platform
    exit_item = wait_for(lambda: platform.items(ReportKind.EXIT), what="queued exit report")[0]
    assert exit_item["code"] == 1 and exit_item["error"] == "died"
    assert [m["step"] for m in platform.items(ReportKind.METRIC)] == list(range(1, 21))
    wait_for(lambda: len(platform.polls) > polls, what="polls after the restart")
    assert running.thread.is_alive() and running.error is None
    assert len(platform.enrollments) == 1
    running.stop()


def test_backs_off_on_server_errors(platform, start_agent):
    platform.failing_polls = 3
    running = start_agent(poll_wait_s=0.5)
    started = time.monotonic()
    wait_for(lambda: len(platform.polls) >= 4, timeout=15, what="recovery after 500s")
    running.stop()
    assert running.error is None
    # 3 failures back off 0.25-0.5, 0.5-1 and 1-2 s: never a tight loop
    assert time.monotonic() - started >= 1.75


def test_uses_the_long_poll_wait(platform, start_agent):
    running = start_agent(poll_wait_s=1.5)
    time.sleep(3.3)
    running.stop()
    waits = [poll["wait_s"] for poll in platform.polls]
    assert 2 <= len(waits) <= 4 and set(waits[:3]) == {1.5}


def test_takes_the_platforms_shorter_poll_timeout(platform, start_agent):
    platform.poll_timeout_s = 0.5
    running = start_agent(poll_wait_s=20.0)
    wait_for(lambda: len(platform.polls) >= 2, what="two polls")
    running.stop()
    assert platform.polls[0]["wait_s"] == 0.5


def test_does_not_spin_when_the_platform_answers_at_once(platform, start_agent):
    platform.hold_polls = False
    running = start_agent(poll_wait_s=5.0)
    time.sleep(2.5)
    running.stop()
    assert len(platform.polls) <= 4
