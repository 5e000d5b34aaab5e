"""Unit tests of the agent's pieces: output parsing, devices, launch env, state, report queue."""

from __future__ import annotations

import io
import json
import sys

import pytest

from hosts.agent.client import Backoff, Transient
from hosts.agent.commands import launch_from_dict
from hosts.agent.devices import DeviceError, cuda_inventory, detect, parse_simulate, slug_for_gpu
from hosts.agent.output import RankOutput, capped_lines, parse_event
from hosts.agent.ranks import (
    host_env,
    rank_argv,
    rank_env,
    rank_scrubber,
    read_control,
    update_control,
    visible_device,
)
from hosts.agent.reporter import Reporter
from hosts.agent.state import AgentState
from kernel.protocol import ReportKind
from tests.support.agents import launch


def test_parse_event_keeps_only_protocol_fields():
    item = parse_event('{"event": "metric", "step": 3, "loss": 2.5, "bogus": 1, "t": 9.0}', rank=2)
    assert item == {"kind": "metric", "rank": 2, "step": 3, "loss": 2.5, "t": 9.0}
    assert parse_event('{"event": "checkpoint", "step": 4, "path": "p", "seconds": 0.1}', 0)["path"] == "p"
    saved = parse_event('{"event": "checkpoint", "step": 4, "path": "p", "loss": 2.5, "eval_loss": 2.75}', 0)
    assert (saved["loss"], saved["eval_loss"]) == (2.5, 2.75)  # each checkpoint's losses reach the platform
    assert parse_event('{"event": "done"}', 0) == "done"
    island = parse_event('{"event": "island", "island": 1, "change": "sync", "bridge_gbps": 2.5, "t": 1}', 0)
    assert island["bridge_gbps"] == 2.5  # a leader's measured bridge travels to the platform
    assert parse_event('{"event": "other"}', 0) is None
    assert parse_event("{not json", 0) is None
    assert parse_event("[1, 2]", 0) is None


def test_capped_lines_cut_long_lines_and_keep_going():
    stream = io.StringIO("short\n" + "x" * 50 + "\nlast")
    assert list(capped_lines(stream, cap=10)) == ["short", "x" * 10, "last"]


def test_log_lines_are_capped_at_2000_chars():
    items = []
    output = RankOutput(0, items.append)
    output.stderr_line("y" * 5000)
    assert len(items[0]["line"]) == 2000 and items[0]["kind"] == ReportKind.LOG


def test_rate_limit_counts_dropped_lines_and_flushes_them_at_exit():
    items = []
    output = RankOutput(1, items.append, log_rate=5)
    for index in range(12):
        output.stdout_line(f"line {index}")
    exit_item = output.exit_item(0)
    assert [i["line"] for i in items] == [f"line {n}" for n in range(5)] + ["[7 lines dropped]"]
    assert exit_item["kind"] == ReportKind.EXIT and exit_item["error"] == ""


def test_devices_simulated_and_cuda():
    assert parse_simulate("tpu-v4:3") == ("tpu-v4", 3)
    assert parse_simulate("mlu370") == ("mlu370", 1)
    with pytest.raises(DeviceError):
        parse_simulate("rtx-4090:zero")
    assert detect("ascend-910b:2", None).devices[1]["memory_gib"] == 64
    assert slug_for_gpu("NVIDIA H100 80GB HBM3") == "h100-80g"
    assert slug_for_gpu("NVIDIA A100-SXM4-80GB") == "a100-80g"
    assert slug_for_gpu("NVIDIA GeForce RTX 4090") == "rtx-4090"
    gpus = [{"index": i, "name": "NVIDIA GeForce RTX 4090", "memory_gib": 23.6} for i in range(2)]
    inventory = detect(None, None, probe=lambda: gpus)
    assert (inventory.chip_type, inventory.chips, inventory.simulated) == ("rtx-4090", 2, False)
    h200 = [{"index": 0, "name": "NVIDIA H200", "memory_gib": 139.8}]
    with pytest.raises(DeviceError, match="--chip-type"):
        cuda_inventory(h200, None)
    assert cuda_inventory(h200, "h100-80g").chip_type == "h100-80g"
    with pytest.raises(DeviceError, match="--simulate"):
        detect(None, None, probe=lambda: [])


def test_rank_env_and_visible_devices():
    rank_launch = launch_from_dict({**launch(job_id=2, rank=3, world_size=4), "future_field": 1})
    env = rank_env(rank_launch, local_rank=1, base={"PYTHONPATH": "/x", "CUDA_VISIBLE_DEVICES": "4,5"})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["MASTER_PORT"]) == ("3", "4", "1", "29502")
    assert env["PYTHONPATH"].endswith("/x") and env["CUDA_VISIBLE_DEVICES"] == "4,5"  # cpu rank: untouched
    assert visible_device("cuda:1", "4,5") == "5"
    assert visible_device("cuda:2", None) == "2"
    assert visible_device("cpu", None) is None
    assert rank_argv("hosts.runtime", "l.json")[1:] == ["-m", "hosts.runtime", "--config", "l.json"]
    assert rank_argv("/t/fake.py", "l.json")[1:] == ["/t/fake.py", "--config", "l.json"]


def test_what_a_host_passes_on_holds_no_store_variable():
    given = {"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "k", "AWS_PROFILE": "p", "STORAGE_URL": "s3://b/p"}
    assert host_env(given) == {"PATH": "/bin"}
    env = rank_env(launch_from_dict(launch()), 0, base=given, platform_url="http://platform:8001")
    assert not {name for name in env if name.startswith("AWS_") or name == "STORAGE_URL"}
    assert env["STARVERSE_PLATFORM_URL"] == "http://platform:8001"


def test_control_file_updates(tmp_path):
    assert read_control(tmp_path) == {"checkpoint": 0, "stop": False, "stop_checkpoint": True}
    update_control(tmp_path, checkpoint=True)
    update_control(tmp_path, checkpoint=True)
    stopped = {"checkpoint": 2, "stop": True, "stop_checkpoint": False}
    assert update_control(tmp_path, stop=True) == stopped
    assert json.loads((tmp_path / "control.json").read_text()) == stopped
    assert [p.name for p in tmp_path.iterdir()] == ["control.json"]  # no temp files left


def test_state_survives_a_restart(tmp_path):
    state = AgentState(tmp_path)
    state.set_enrollment({"node_token": "svn_1", "node_id": 4, "poll_timeout_s": 20})
    state.see_epoch(9, 3)
    state.see_epoch(9, 2)
    state.record(11, error="stale epoch")
    again = AgentState(tmp_path)
    assert again.node_token == "svn_1" and again.enrollment["node_id"] == 4
    assert again.newest_epoch(9) == 3 and again.executed(11)
    acks = again.pending_acks()
    assert acks == [{"id": 11, "error": "stale epoch"}]
    again.confirm_acks(acks)
    again.ack_again(11)
    assert again.pending_acks() == [{"id": 11, "error": None}]
    again.forget_token("svn_other")
    assert again.node_token == "svn_1"
    again.forget_token("svn_1")
    assert AgentState(tmp_path).node_token is None


class _DownClient:
    def report(self, token, body):
        raise Transient("down")


def test_report_queue_is_bounded_but_keeps_exit_items():
    reporter = Reporter(_DownClient(), lambda: "svn_x", lambda job, epoch: None, max_queue=10)
    reporter.put(1, 1, {"kind": "exit", "rank": 0, "code": 1, "error": "e", "t": 0})
    for step in range(30):
        reporter.put(1, 1, {"kind": "metric", "rank": 1, "step": step, "t": 0})
        reporter.put(1, 1, {"kind": "log", "rank": 1, "line": "l", "t": 0})
    assert reporter.pending() == 10
    batch, dropped = reporter._take((1, 1))
    assert dropped == 51 and "51 report items dropped" in batch[0]["line"]
    assert batch[1]["kind"] == "exit" and all(item["kind"] == "metric" for item in batch[2:])
    assert not reporter._send_all()  # the platform is down: nothing is discarded
    assert reporter.pending() == 10


def test_backoff_doubles_to_five_seconds_with_jitter():
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(8)]
    assert 0.25 <= delays[0] <= 0.5 and 0.5 <= delays[1] <= 1.0
    assert all(2.5 <= d <= 5.0 for d in delays[4:])
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_a_ranks_lines_and_exit_error_leave_the_host_without_its_server_paths(tmp_path):
    run = tmp_path / "agent" / "runs" / "job-5-epoch-1"
    rank_launch = launch_from_dict({**launch(job_id=5), "run_dir": str(run)})
    items = []
    output = RankOutput(0, items.append, scrub=rank_scrubber(rank_launch, run / "rank-0"))
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))

    output.stderr_line(f'  File "{site_packages}/torch/nn/modules/module.py", line 1751, in _call_impl')
    output.stderr_line(f"FileNotFoundError: [Errno 2] No such file: '{run}/rank-0/data.txt'")
    output.stdout_line(f"resumed from {tmp_path}/agent/runs/job-5-epoch-0/step-20")
    error = output.exit_item(1)["error"]

    shown = [item["line"] for item in items]
    assert shown == [
        '  File "<site-packages>/torch/nn/modules/module.py", line 1751, in _call_impl',
        "FileNotFoundError: [Errno 2] No such file: '<run>/rank-0/data.txt'",
        "resumed from <agent>/runs/job-5-epoch-0/step-20",
    ]
    assert str(tmp_path) not in error and site_packages not in error and "<run>/rank-0/data.txt" in error


def test_a_progress_bar_redrawn_with_carriage_returns_is_sent_as_its_last_frame():
    items = []
    output = RankOutput(0, items.append)
    output.stderr_line(" 10%|█         | 1/10 [00:00<00:01]\r 50%|█████     | 5/10\r100%|██████████| 10/10 [00:01]")
    output.stderr_line("\r\r")
    output.stderr_line("")
    assert [item["line"] for item in items] == ["100%|██████████| 10/10 [00:01]", ""]
