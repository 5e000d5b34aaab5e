"""Epoch fencing and command idempotency."""

from __future__ import annotations

from kernel.protocol import ReportKind
from tests.support.agents import launch, wait_for


def _metric_epochs(platform, job_id):
    return {
        body["epoch"]
        for body in list(platform.reports)
        if body["job_id"] == job_id
        for item in body["items"]
        if item["kind"] == ReportKind.METRIC
    }


def test_older_epoch_command_is_refused_and_acked_with_an_error(platform, start_agent, agent_config):
    running = start_agent()
    platform.send("start", 1, 3, {"ranks": [launch(epoch=3, steps=-1)]})
    wait_for(lambda: platform.items(ReportKind.METRIC), what="metrics")
    stale_stop = platform.send("stop", 1, 2, {"reason": "old", "checkpoint": False, "grace_s": 0})
    stale_start = platform.send("start", 1, 2, {"ranks": [launch(epoch=2)]})
    wait_for(lambda: stale_stop in platform.acks and stale_start in platform.acks, what="acks")
    assert "stale epoch" in platform.acks[stale_stop]
    assert "stale epoch" in platform.acks[stale_start]
    assert not (agent_config.data_dir / "runs" / "job-1-epoch-2").exists()
    ranks = platform.polls[-1]["ranks"]
    assert [(r["epoch"], r["state"]) for r in ranks] == [(3, "running")]
    running.stop()


def test_newer_epoch_start_stops_the_older_ranks(platform, start_agent):
    running = start_agent()
    platform.send("start", 2, 1, {"ranks": [launch(job_id=2, epoch=1, steps=-1)]})
    wait_for(lambda: 1 in _metric_epochs(platform, 2), what="epoch 1 metrics")
    platform.send("start", 2, 2, {"ranks": [launch(job_id=2, epoch=2, steps=-1)]})
    old_exit = wait_for(lambda: platform.items(ReportKind.EXIT, job_id=2, epoch=1), what="old exit")
    wait_for(lambda: 2 in _metric_epochs(platform, 2), what="epoch 2 metrics")
    assert old_exit[0]["code"] == -15
    states = wait_for(
        lambda: (s := {(r["epoch"], r["state"]) for r in platform.polls[-1]["ranks"]}) and (2, "running") in s and s,
        what="a poll reporting epoch 2 running",
    )
    assert (1, "running") not in states
    running.stop()


def test_a_command_resent_before_its_ack_runs_once(platform, start_agent, agent_config):
    running = start_agent()
    platform.send("start", 3, 1, {"ranks": [launch(job_id=3, steps=-1)]})
    wait_for(lambda: platform.items(ReportKind.METRIC), what="metrics")
    checkpoint = {"reason": "x"}
    command_id = platform.send("checkpoint", 3, 1, checkpoint, command_id=77)
    wait_for(lambda: 77 in platform.acks, what="ack")
    platform.acks.clear()
    platform.send("checkpoint", 3, 1, checkpoint, command_id=command_id)  # the ack got lost: re-sent
    wait_for(lambda: 77 in platform.acks, what="second ack")
    running.stop()
    assert '"checkpoint": 1' in (agent_config.data_dir / "runs" / "job-3-epoch-1" / "control.json").read_text()


def test_stale_epoch_on_report_kills_those_ranks(platform, start_agent):
    running = start_agent()
    platform.send("start", 4, 1, {"ranks": [launch(job_id=4, steps=-1)]})
    wait_for(lambda: platform.items(ReportKind.METRIC), what="metrics")
    platform.report_status = lambda body: 409 if body["epoch"] == 1 else 200
    wait_for(lambda: any(r["state"] == "exited" for r in platform.polls[-1]["ranks"]), what="rank exited")
    late = platform.send("checkpoint", 4, 1, {"reason": "late"})
    wait_for(lambda: late in platform.acks, what="ack")
    assert "stale epoch" in platform.acks[late]  # 409 taught the agent that epoch 1 is over
    running.stop()
