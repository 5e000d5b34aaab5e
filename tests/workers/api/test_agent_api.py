"""The agent side of the API: enrollment, long-poll commands, reports fenced by epoch."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from fleet.choices import AgentStatus, CommandStatus, JobStatus
from fleet.models import Job, Node, Pool
from portal.models import ApiToken
from tests.support.plans import hand_plan
from workers.models import AgentCommand, EnrollmentToken, JobLogLine, JobMetric
from workers.services import channel
from workers.services.monitor import reconcile
from workers.services.node_lifecycle import record_heartbeat
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db


def enroll_body(raw, **extra):
    return {
        "enrollment_token": raw,
        "hostname": "gpu-host-1",
        "chip_type": "rtx-4090",
        "chips": 2,
        "simulated": True,
        **extra,
    }


def test_an_agent_enrolls_with_the_pools_token_and_gets_a_hashed_node_token(catalog):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=2)
    response = APIClient().post("/api/v1/agent/enroll/", enroll_body(raw), format="json")
    assert response.status_code == 201
    node = Node.objects.get(hostname="gpu-host-1")
    token = response.json()["node_token"]
    assert node.token_hash and token not in node.token_hash
    assert node.agent_status == AgentStatus.ONLINE and node.simulated and node.chips == 2


def test_re_enrolling_with_the_current_node_token_rotates_it(catalog, agent_api):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=2)
    first = APIClient().post("/api/v1/agent/enroll/", enroll_body(raw), format="json").json()["node_token"]
    again = {**enroll_body(""), "node_token": first, "address": "10.0.0.9"}
    second = APIClient().post("/api/v1/agent/enroll/", again, format="json").json()["node_token"]
    assert agent_api(first).post("/api/v1/agent/poll/", {}, format="json").status_code == 401
    assert agent_api(second).post("/api/v1/agent/poll/", {}, format="json").status_code == 200
    assert Node.objects.get(hostname="gpu-host-1").address == "10.0.0.9"


@pytest.mark.parametrize(
    ("change", "status", "field"),
    [
        ({"enrollment_token": "sve_wrong"}, 403, None),
        ({"chip_type": "tpu-v5e"}, 403, None),
        ({"chips": 0}, 400, "chips"),
        ({"hostname": "bad host!"}, 400, "hostname"),
        ({"simulated": "maybe"}, 400, "simulated"),
    ],
)
def test_a_bad_enrollment_is_refused_clearly_and_creates_nothing(catalog, change, status, field):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=2)
    response = APIClient().post("/api/v1/agent/enroll/", {**enroll_body(raw), **change}, format="json")
    assert response.status_code == status
    if field:
        assert field in response.json()["errors"]
    else:
        assert response.json()["detail"]
    assert not Node.objects.filter(hostname="gpu-host-1").exists()


def test_a_poll_is_a_heartbeat(enroll, agent_api):
    node, token = enroll("n1")
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=None)
    response = agent_api(token).post("/api/v1/agent/poll/", {"health": {"load": 0.5}}, format="json")
    assert response.status_code == 200 and response.json()["commands"] == []
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None and node.health == {"load": 0.5}


def test_user_tokens_cannot_call_agent_endpoints_and_node_tokens_cannot_call_user_endpoints(enroll, agent_api, alice):
    _, node_token = enroll("n1")
    _, user_token = ApiToken.issue(alice)
    assert agent_api(user_token).post("/api/v1/agent/poll/", {}, format="json").status_code == 401
    assert agent_api(node_token).get("/api/v1/account/").status_code == 401


def test_a_placed_job_reaches_its_agents_as_start_commands(enroll, agent_api, planning_job):
    a, token_a = enroll("a")
    b, _ = enroll("b", chip="tpu-v5e")
    job = planning_job()
    allocate(job, hand_plan((a, 1), (b, 3)))
    commands = agent_api(token_a).post("/api/v1/agent/poll/", {}, format="json").json()["commands"]
    assert [c["type"] for c in commands] == ["start"]
    launch = commands[0]["payload"]["ranks"][0]
    assert (launch["rank"], launch["world_size"], launch["micro_batches"]) == (0, 2, [1, 3])
    assert launch["epoch"] == 1 and launch["paced_tokens_per_s"] == 1000.0


def test_commands_are_resent_until_acked(enroll, agent_api, planning_job):
    node, token = enroll("a")
    allocate(planning_job(), hand_plan((node, 2)))
    api = agent_api(token)
    first = api.post("/api/v1/agent/poll/", {}, format="json").json()["commands"]
    again = api.post("/api/v1/agent/poll/", {}, format="json").json()["commands"]
    assert [c["id"] for c in first] == [c["id"] for c in again]
    api.post("/api/v1/agent/poll/", {"acks": [first[0]["id"]]}, format="json")
    assert AgentCommand.objects.get(pk=first[0]["id"]).status == CommandStatus.DONE
    assert api.post("/api/v1/agent/poll/", {}, format="json").json()["commands"] == []


def test_a_refused_command_is_recorded_with_its_reason(enroll, agent_api, planning_job):
    node, token = enroll("a")
    allocate(planning_job(), hand_plan((node, 2)))
    api = agent_api(token)
    command = api.post("/api/v1/agent/poll/", {}, format="json").json()["commands"][0]
    api.post("/api/v1/agent/poll/", {"acks": [{"id": command["id"], "error": "stale epoch"}]}, format="json")
    refused = AgentCommand.objects.get(pk=command["id"])
    assert (refused.status, refused.error) == (CommandStatus.REFUSED, "stale epoch")


@pytest.mark.django_db(transaction=True)
def test_a_waiting_long_poll_returns_as_soon_as_a_command_is_queued(enroll, agent_api, planning_job, settings):
    settings.AGENT_POLL_WAIT_S = 10
    node, token = enroll("a")
    channel.clear_wake(node.pk)
    job = planning_job()
    threading.Timer(1.0, lambda: allocate(job, hand_plan((node, 2)))).start()
    started = time.monotonic()
    commands = agent_api(token).post("/api/v1/agent/poll/", {"wait_s": 10}, format="json").json()["commands"]
    elapsed = time.monotonic() - started
    assert [c["type"] for c in commands] == ["start"]
    assert 0.9 < elapsed < 5


def report(api, job, epoch, *items):
    return api.post("/api/v1/agent/report/", {"job_id": job.pk, "epoch": epoch, "items": list(items)}, format="json")


def metric(rank, step, loss=2.0):
    return {
        "kind": "metric",
        "rank": rank,
        "step": step,
        "loss": loss,
        "tokens_per_s": 500.0,
        "t": time.time(),
    }


def test_metrics_start_the_job_and_move_its_progress(enroll, agent_api, planning_job):
    node, token = enroll("a", chips=2)
    job = planning_job()
    allocate(job, hand_plan((node, 2), (node, 2)))
    api = agent_api(token)
    assert (
        report(
            api,
            job,
            1,
            metric(0, 1, 5.0),
            metric(1, 1, 5.0),
            metric(0, 2, 4.0),
            {"kind": "log", "rank": 1, "line": "hello"},
        ).status_code
        == 200
    )
    job.refresh_from_db()
    assert (job.status, job.step, job.loss, job.first_loss) == (JobStatus.RUNNING, 2, 4.0, 5.0)
    assert JobMetric.objects.filter(job=job).count() == 3
    assert JobLogLine.objects.get(job=job).line == "hello"


def test_all_ranks_exiting_cleanly_at_the_last_step_succeeds_and_frees_the_chips(enroll, agent_api, planning_job):
    node, token = enroll("a", chips=2)
    job = planning_job(max_steps=2)
    allocate(job, hand_plan((node, 2), (node, 2)))
    api = agent_api(token)
    report(
        api,
        job,
        1,
        metric(0, 2),
        metric(1, 2),
        {"kind": "exit", "rank": 0, "code": 0},
        {"kind": "exit", "rank": 1, "code": 0},
    )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert not job.allocations.open().exists()


def test_a_rank_failure_ends_the_job_with_the_ranks_error_once_every_node_is_heard_from(
    enroll, agent_api, planning_job, fund, alice
):
    fund(alice)
    a, token_a = enroll("a")
    b, _ = enroll("b")
    job = planning_job()
    allocate(job, hand_plan((a, 2), (b, 2)))
    report(
        agent_api(token_a),
        job,
        1,
        {"kind": "exit", "rank": 0, "code": 1, "error": "Traceback...\nRuntimeError: CUDA out of memory"},
    )
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING  # a peer's host may have died: wait until every node is heard from
    record_heartbeat(a, {})
    reconcile()
    assert Job.objects.get(pk=job.pk).status == JobStatus.PROVISIONING  # b has not polled since the exit
    record_heartbeat(b, {})
    reconcile()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "CUDA out of memory" in job.status_reason
    assert not job.allocations.open().exists()
    assert AgentCommand.objects.filter(node=b, job=job, type="stop").exists()


def test_log_lines_and_a_crashed_ranks_error_are_kept_without_the_platforms_server_paths(
    enroll, agent_api, planning_job, fund, alice, settings
):
    fund(alice)
    node, token = enroll("a")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    run = Path(settings.DATA_DIR) / "agents" / "demo-a" / "runs" / f"job-{job.pk}-epoch-1"
    packages = next(path for path in sys.path if path.endswith("site-packages"))
    report(
        agent_api(token),
        job,
        1,
        {"kind": "log", "rank": 0, "line": f'  File "{packages}/torch/serialization.py", line 1425, in load'},
        {"kind": "exit", "rank": 0, "code": 1, "error": f"Traceback...\nFileNotFoundError: '{run}/rank-0/x.pt'"},
    )
    record_heartbeat(node, {})
    reconcile()

    job.refresh_from_db()
    assert JobLogLine.objects.get(job=job).line == '  File "<site-packages>/torch/serialization.py", line 1425, in load'
    assert job.status == JobStatus.FAILED
    shown = f"<data>/agents/demo-a/runs/job-{job.pk}-epoch-1/rank-0/x.pt"
    assert job.status_reason == f"Rank 0 exited with code 1: FileNotFoundError: '{shown}'"
    assert str(settings.DATA_DIR) not in job.rank_exits.get().error


def test_a_report_for_an_older_epoch_is_refused_with_409(enroll, agent_api, planning_job):
    node, token = enroll("a")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    Job.objects.filter(pk=job.pk).update(epoch=2)
    response = report(agent_api(token), job, 1, metric(0, 1))
    assert response.status_code == 409
    assert not JobMetric.objects.exists()


def test_a_node_cannot_report_for_a_job_it_does_not_run(enroll, agent_api, planning_job):
    a, _ = enroll("a")
    _, token_b = enroll("b")
    job = planning_job()
    allocate(job, hand_plan((a, 2)))
    assert report(agent_api(token_b), job, 1, metric(0, 1)).status_code == 400
    assert not JobMetric.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"job_id": 1},
        {"job_id": 1, "epoch": 1, "items": [{"kind": "metric", "rank": 0}]},
        {"job_id": 1, "epoch": 1, "items": [{"kind": "nonsense", "rank": 0}]},
        {"job_id": "x", "epoch": 1, "items": []},
    ],
)
def test_a_malformed_report_is_a_400_naming_the_field(enroll, agent_api, body):
    _, token = enroll("a")
    response = agent_api(token).post("/api/v1/agent/report/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"]


def test_a_malformed_heartbeat_is_a_400(enroll, agent_api):
    _, token = enroll("a")
    response = agent_api(token).post("/api/v1/agent/poll/", {"wait_s": 999, "acks": ["x"]}, format="json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"wait_s", "acks"}


def test_a_refusal_reason_can_come_beside_the_ack(enroll, agent_api, planning_job):
    node, token = enroll("a")
    allocate(planning_job(), hand_plan((node, 2)))
    api = agent_api(token)
    command = api.post("/api/v1/agent/poll/", {}, format="json").json()["commands"][0]
    api.post(
        "/api/v1/agent/poll/",
        {"acks": [command["id"]], "ack_errors": [{"id": command["id"], "error": "old"}]},
        format="json",
    )
    assert AgentCommand.objects.get(pk=command["id"]).status == CommandStatus.REFUSED


def test_a_drain_set_while_a_poll_is_in_flight_is_not_undone_by_that_poll(enroll):
    node, _ = enroll("a")  # the poll authenticated the node while it was online...
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.DRAINING)  # ...then the operator drained it
    record_heartbeat(node, {"load": 1})
    assert Node.objects.get(pk=node.pk).agent_status == node.agent_status == AgentStatus.DRAINING
