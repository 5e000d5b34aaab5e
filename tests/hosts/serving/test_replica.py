"""A deployment's replica as the agent runs it (`python -m hosts.serving.replica --config launch.json`): it
reports its engine starting and ready on stdout as a rank reports events, serves until control.json says
stop, drains open connections first, and takes its engine with it however it ends."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kernel.protocol import CONTROL_FILE, RankLaunch
from kernel.serving import EngineLaunch

REPO = Path(__file__).resolve().parents[3]
NAME = "tiny-chat"


def launch_file(run_dir: Path, model: Path) -> Path:
    serve = EngineLaunch(model=str(model), served_model_name=NAME, port=0, simulated=True, chip_type="rtx-4090")
    launch = RankLaunch(
        job_id=5,
        epoch=1,
        rank=0,
        world_size=1,
        master_addr="127.0.0.1",
        master_port=1,
        model={},
        dataset="",
        micro_batches=[1],
        max_steps=1,
        zero_stage=0,
        run_dir=str(run_dir),
        checkpoint_dir="",
        serve=serve.as_dict(),
    )
    rank_dir = run_dir / "rank-0"
    rank_dir.mkdir(parents=True)
    (run_dir / CONTROL_FILE).write_text(json.dumps({"checkpoint": 0, "stop": False}))
    path = rank_dir / "launch.json"
    path.write_text(json.dumps(launch.as_dict()))
    return path


class Replica:
    def __init__(self, config: Path):
        self.run_dir = config.parent.parent
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hosts.serving.replica", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.events: list[dict] = []

    def next_state(self, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"the replica ended; events so far: {self.events}")
            event = json.loads(line)
            self.events.append(event)
            if event.get("event") == "serving":
                return event
        raise AssertionError(f"no state within {timeout_s}s: {self.events}")

    def stop(self) -> None:
        (self.run_dir / CONTROL_FILE).write_text(json.dumps({"checkpoint": 0, "stop": True, "stop_checkpoint": False}))


@pytest.fixture
def replica(tiny_model_dir, tmp_path):
    replica = Replica(launch_file(tmp_path / "run", tiny_model_dir))
    yield replica
    if replica.process.poll() is None:
        os.killpg(replica.process.pid, signal.SIGKILL)
        replica.process.wait()


def engine_children(replica: Replica) -> list[psutil.Process]:
    """The engine: the replica's child process (in a process group of its own)."""
    return psutil.Process(replica.process.pid).children()


def test_a_replica_reports_ready_serves_drains_and_stops_cleanly(replica):
    assert replica.next_state()["state"] == "starting"
    ready = replica.next_state()
    assert ready["state"] == "ready" and ready["simulated"] is True and ready["engine"] == "transformers"
    url = ready["url"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    [engine] = engine_children(replica)

    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    held = http.client.HTTPConnection(host, int(port), timeout=30)
    held.request("GET", "/v1/models")
    assert NAME in held.getresponse().read().decode()  # the connection stays open (keep-alive)

    replica.stop()
    assert replica.next_state()["state"] == "draining"
    time.sleep(1.0)
    assert replica.process.poll() is None, "a stop waits for the open connection to close"
    held.close()
    assert replica.next_state()["state"] == "stopped"
    assert replica.process.wait(timeout=60) == 0
    assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE


def test_a_replica_killed_outright_takes_its_engine_with_it(replica):
    replica.next_state()
    assert replica.next_state()["state"] == "ready"
    [engine] = engine_children(replica)
    os.killpg(replica.process.pid, signal.SIGKILL)  # what the agent does after its grace
    replica.process.wait()
    engine.wait(timeout=30)  # the engine's own process group was not signalled: it died with its parent
    assert not engine.is_running()
