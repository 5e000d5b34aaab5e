"""Start, checkpoint and stop commands; what ranks say reaches the platform."""

from __future__ import annotations

import json

from kernel.protocol import ReportKind
from tests.support.agents import launch, wait_for


def _rank_dir(config, job_id, epoch, rank):
    return config.data_dir / "runs" / f"job-{job_id}-epoch-{epoch}" / f"rank-{rank}"


def _control(config, job_id, epoch):
    return json.loads((config.data_dir / "runs" / f"job-{job_id}-epoch-{epoch}" / "control.json").read_text())


def _exits(platform, **filters):
    return {item["rank"]: item for item in platform.items(ReportKind.EXIT, **filters)}


def test_start_launches_ranks_with_env_and_launch_json(platform, start_agent, agent_config):
    running = start_agent()
    ranks = [launch(job_id=7, epoch=2, rank=r, world_size=3) for r in (2, 1)]
    ranks[0]["device"] = "cuda:1"  # a GPU rank: one visible GPU, which is cuda:0 inside the rank
    command_id = platform.send("start", 7, 2, {"ranks": ranks})
    wait_for(lambda: len(_exits(platform, job_id=7)) == 2, what="both ranks to exit")
    wait_for(lambda: command_id in platform.acks, what="ack")
    assert platform.acks[command_id] is None
    running.stop()

    env2 = json.loads((_rank_dir(agent_config, 7, 2, 2) / "env.json").read_text())
    assert env2 == {
        "RANK": "2",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29507",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    env1 = json.loads((_rank_dir(agent_config, 7, 2, 1) / "env.json").read_text())
    assert env1["LOCAL_RANK"] == "0" and env1["RANK"] == "1"
    config = json.loads((_rank_dir(agent_config, 7, 2, 2) / "launch.json").read_text())
    assert config["run_dir"] == str(agent_config.data_dir / "runs" / "job-7-epoch-2")
    assert config["device"] == "cuda:0" and config["master_port"] == 29507
    assert _control(agent_config, 7, 2) == {"checkpoint": 0, "stop": False}


def test_ranks_get_the_platforms_url_and_none_of_the_store_variables_the_agent_was_given(
    platform, start_agent, agent_config, monkeypatch
):
    """Hosts are third parties (#28): a rank reaches storage only with its launch's grant."""
    for name, value in {"AWS_SECRET_ACCESS_KEY": "k", "AWS_ACCESS_KEY_ID": "i", "STORAGE_URL": "s3://b/p"}.items():
        monkeypatch.setenv(name, value)
    running = start_agent()
    platform.send("start", 3, 1, {"ranks": [launch(job_id=3, steps=1)]})
    wait_for(lambda: _exits(platform, job_id=3), what="the rank to exit")
    running.stop()

    seen = json.loads((_rank_dir(agent_config, 3, 1, 0) / "storage_env.json").read_text())
    assert seen == {"STARVERSE_PLATFORM_URL": platform.url}


def test_metrics_logs_and_exit_reach_the_platform(platform, start_agent):
    running = start_agent()
    platform.send("start", 1, 1, {"ranks": [launch(steps=3)]})
    wait_for(lambda: _exits(platform), what="exit report")
    running.stop()

    metrics = platform.items(ReportKind.METRIC, job_id=1, epoch=1)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert set(metrics[0]) == {
        "kind",
        "rank",
        "step",
        "loss",
        "tokens",
        "tokens_per_s",
        "step_time_s",
        "samples_seen",
        "memory_mb",
        "t",
    }
    logs = [item["line"] for item in platform.items(ReportKind.LOG)]
    assert "fake rank 0 starting" in logs
    assert _exits(platform)[0]["code"] == 0 and _exits(platform)[0]["error"] == ""
    kinds = [item["kind"] for item in platform.items()]
    assert kinds[-1] == ReportKind.EXIT  # the exit comes after everything the rank printed
    states = [r["state"] for poll in platform.polls for r in poll["ranks"]]
    assert "exited" in states


def test_a_placement_s_staged_files_go_once_its_last_rank_on_the_node_exits(platform, start_agent, agent_config):
    running = start_agent()
    fast, slow = launch(job_id=3, rank=0, world_size=2, steps=2), launch(job_id=3, rank=1, world_size=2, steps=40)
    fast["extra"]["stage"] = slow["extra"]["stage"] = True
    platform.send("start", 3, 1, {"ranks": [fast, slow]})
    run_dir = agent_config.data_dir / "runs" / "job-3-epoch-1"
    wait_for(lambda: 0 in _exits(platform, job_id=3), what="the first rank to exit")
    assert (run_dir / "inputs" / "datasets_1").is_dir()  # the other rank still uses them
    wait_for(lambda: 1 in _exits(platform, job_id=3), what="the second rank to exit")
    wait_for(lambda: not (run_dir / "inputs").exists(), what="the staged inputs to go")
    running.stop()
    assert not (run_dir / "resume").exists() and not (run_dir / "checkpoints").exists()
    assert (run_dir / "rank-0" / "env.json").is_file() and (run_dir / "control.json").is_file()


def test_a_failed_rank_reports_its_stderr(platform, start_agent):
    running = start_agent()
    stderr = [f"line {i}" for i in range(30)] + ["RuntimeError: NCCL timeout"]
    platform.send("start", 3, 1, {"ranks": [launch(job_id=3, steps=1, exit_code=3, stderr=stderr)]})
    exit_item = wait_for(lambda: _exits(platform).get(0), what="exit report")
    running.stop()
    assert exit_item["code"] == 3
    lines = exit_item["error"].splitlines()
    assert len(lines) == 20 and lines[-1] == "RuntimeError: NCCL timeout"


def test_logs_are_capped_and_rate_limited(platform, start_agent):
    running = start_agent(log_rate=20)
    platform.send("start", 4, 1, {"ranks": [launch(job_id=4, steps=2, log_burst=200, step_s=0.01)]})
    wait_for(lambda: _exits(platform), what="exit report")
    running.stop()
    lines = [item["line"] for item in platform.items(ReportKind.LOG)]
    assert len(lines) < 100
    dropped = [line for line in lines if line.endswith("lines dropped]")]
    assert dropped and sum(int(line[1:].split()[0]) for line in dropped) + len(lines) - len(dropped) == 401


def test_checkpoint_and_stop_write_control_json(platform, start_agent, agent_config):
    running = start_agent()
    platform.send("start", 5, 1, {"ranks": [launch(job_id=5, steps=-1)]})
    wait_for(lambda: platform.items(ReportKind.METRIC), what="first metric")
    checkpoint = platform.send("checkpoint", 5, 1, {"reason": "schedule"})
    wait_for(lambda: platform.items(ReportKind.CHECKPOINT), what="checkpoint event")
    assert _control(agent_config, 5, 1) == {"checkpoint": 1, "stop": False, "stop_checkpoint": True}
    assert platform.acks[checkpoint] is None

    platform.send("stop", 5, 1, {"reason": "user", "checkpoint": True})
    exit_item = wait_for(lambda: _exits(platform).get(0), what="exit after stop")
    running.stop()
    assert _control(agent_config, 5, 1) == {"checkpoint": 2, "stop": True, "stop_checkpoint": True}
    assert exit_item["code"] == 0  # it stopped by itself, well inside the grace period
    assert len(platform.items(ReportKind.CHECKPOINT)) == 2


def test_stop_kills_a_rank_that_ignores_it(platform, start_agent):
    running = start_agent(term_wait_s=0.5)
    platform.send(
        "start",
        6,
        1,
        {
            "ranks": [
                launch(job_id=6, steps=-1, ignore_stop=True),
                launch(job_id=6, rank=1, world_size=2, steps=-1, ignore_stop=True, ignore_sigterm=True),
            ]
        },
    )
    wait_for(lambda: len({m["rank"] for m in platform.items(ReportKind.METRIC)}) == 2, what="metrics")
    platform.send("stop", 6, 1, {"reason": "user", "checkpoint": False, "grace_s": 0.5})
    exits = wait_for(lambda: len(_exits(platform)) == 2 and _exits(platform), timeout=10, what="exits")
    running.stop()
    assert exits[0]["code"] == -15  # SIGTERM after the grace period
    assert exits[1]["code"] == -9  # and SIGKILL when SIGTERM is ignored too


def test_a_leftover_control_file_does_not_stop_new_ranks(platform, start_agent, agent_config):
    """An earlier agent process left stop=true for this epoch; the relaunched rank must run."""
    run_dir = agent_config.data_dir / "runs" / "job-8-epoch-1"
    run_dir.mkdir(parents=True)
    (run_dir / "control.json").write_text('{"checkpoint": 4, "stop": true}')
    running = start_agent()
    platform.send("start", 8, 1, {"ranks": [launch(job_id=8, steps=2)]})
    wait_for(lambda: _exits(platform), what="exit report")
    running.stop()
    assert len(platform.items(ReportKind.METRIC)) == 2
