"""A host frozen past the heartbeat deadline (agent and rank SIGSTOPped) comes back to a platform
that fenced its placement: its late reports are refused and its old rank is killed at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from kernel.protocol import ReportKind
from tests.support.agents import FAKE_RANK, launch, wait_for
from tests.support.fake_platform import ENROLLMENT_TOKEN


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_frozen_host_that_comes_back_kills_its_fenced_rank_and_its_late_reports_are_refused(platform, tmp_path):
    env = dict(os.environ, STARVERSE_RANK_MODULE=FAKE_RANK, STARVERSE_ENROLLMENT_TOKEN=ENROLLMENT_TOKEN)
    agent = subprocess.Popen(
        [sys.executable, "-m", "hosts.agent", "--platform", platform.url, "--simulate", "rtx-4090:1",
         "--data-dir", str(tmp_path), "--poll-wait", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        # A rank that ignores the stop asked through control.json: only a kill ends it.
        platform.send("start", 5, 1, {"ranks": [launch(job_id=5, steps=-1, step_s=0.05, ignore_stop=True)]})
        wait_for(lambda: platform.items(ReportKind.METRIC, job_id=5), what="metrics")
        rank = wait_for(lambda: [r["pid"] for p in platform.polls for r in p["ranks"] if r["pid"]], what="rank")[0]
        for pid in (agent.pid, rank):
            os.kill(pid, signal.SIGSTOP)

        # Meanwhile the platform declared the host lost: epoch 1 is fenced and a kill waits for it.
        refused = []
        platform.report_status = lambda body: (refused.append(body) or 409) if body["epoch"] == 1 else 200
        kill = platform.send("stop", 5, 2, {"reason": "node lost", "checkpoint": False, "grace_s": 0})
        time.sleep(1.0)
        accepted = len(platform.items(ReportKind.METRIC, job_id=5, epoch=1))
        for pid in (agent.pid, rank):
            os.kill(pid, signal.SIGCONT)

        woke = time.monotonic()
        wait_for(lambda: gone(rank), timeout=15, what="the fenced rank to be killed")
        killed_after = time.monotonic() - woke
        wait_for(lambda: kill in platform.acks, what="the kill's ack")
        assert platform.acks[kill] is None
        assert killed_after < 8, f"the fenced rank lived {killed_after:.1f}s after the host came back"
        wait_for(lambda: refused, what="a late report, refused")
        assert len(platform.items(ReportKind.METRIC, job_id=5, epoch=1)) == accepted  # nothing late got in
        assert agent.poll() is None  # the agent itself carries on
    finally:
        os.kill(agent.pid, signal.SIGCONT)
        agent.terminate()
        agent.wait(timeout=30)
