"""Nobody takes over a node: enrolled hosts keep their identity, enrollment tokens are limited,
declared chips are approved, and tokens never appear on a command line."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zoneinfo
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from base.tokens import hash_token
from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node, Pool
from launcher.processes import demo_fleet_processes
from tests.support.plans import hand_plan
from tests.support.stack import Stack
from workers.models import AgentCommand, EnrollmentToken
from workers.services.enrollment import EnrollmentError, enroll_node
from workers.services.placement import allocate

ENROLL = "/api/v1/agent/enroll/"
POLL = "/api/v1/agent/poll/"


def body(token: str = "", hostname: str = "gpu-1", chips: int = 2, **extra) -> dict:
    return {"enrollment_token": token, "hostname": hostname, "chip_type": "rtx-4090", "chips": chips,
            "simulated": True, **extra}  # fmt: skip


def token(chips: int = 2, **issue) -> str:
    return EnrollmentToken.issue(Pool.objects.get(chip_type__slug="rtx-4090"), chips=chips, **issue)[1]


def as_node(node_token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token}")
    return api


def enroll(payload: dict):
    return APIClient().post(ENROLL, payload, format="json")


@pytest.fixture
def running_node(catalog, alice):
    """gpu-1 enrolled with a two-use pool token, running a job: (node token, pool token, job)."""
    pool_token = token(max_uses=2)
    node_token = enroll(body(pool_token)).json()["node_token"]
    node = Node.objects.get(hostname="gpu-1")
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000, status=JobStatus.PLANNING,
    )  # fmt: skip
    allocate(job, hand_plan((node, 2)))
    return node_token, pool_token, job


pytestmark = pytest.mark.django_db


def test_a_second_agent_with_the_pools_token_cannot_take_over_an_enrolled_host(running_node):
    node_token, pool_token, job = running_node
    before = Node.objects.get(hostname="gpu-1").token_hash

    response = enroll(body(pool_token, address="6.6.6.6"))

    assert response.status_code == 403
    assert response.json()["code"] == "host_already_enrolled"
    assert "current node token" in response.json()["detail"] and "Reset node" in response.json()["detail"]
    node = Node.objects.get(hostname="gpu-1")
    assert node.token_hash == before and node.address == "127.0.0.1"  # where the real agent enrolled from
    assert EnrollmentToken.objects.get(token_hash=hash_token(pool_token)).uses == 1
    # The real node keeps its token and its job's commands.
    answer = as_node(node_token).post(POLL, {}, format="json")
    assert answer.status_code == 200
    assert [(c["type"], c["job_id"]) for c in answer.json()["commands"]] == [("start", job.pk)]


def test_the_host_re_enrolls_itself_with_its_current_node_token(running_node):
    node_token, _, _ = running_node
    response = enroll({**body(), "enrollment_token": "", "node_token": node_token, "address": "10.0.0.2"})
    assert response.status_code == 201
    renewed = response.json()["node_token"]
    assert as_node(node_token).post(POLL, {}, format="json").status_code == 401
    assert as_node(renewed).post(POLL, {}, format="json").status_code == 200
    assert Node.objects.get(hostname="gpu-1").address == "10.0.0.2"


def test_a_wrong_node_token_re_enrolls_nothing(running_node):
    node_token, _, _ = running_node
    response = enroll({**body(), "node_token": "svn_guessed"})
    assert response.status_code == 403 and response.json()["code"] == "node_token_invalid"
    assert as_node(node_token).post(POLL, {}, format="json").status_code == 200


def test_an_operators_reset_lets_the_next_enrollment_take_the_host_and_moves_its_jobs(running_node, client, operator):
    node_token, _, job = running_node
    node = Node.objects.get(hostname="gpu-1")
    client.force_login(operator)
    response = client.post("/admin/fleet/node/", {"action": "reset_node", "_selected_action": [node.pk]}, follow=True)
    assert response.status_code == 200 and "reset" in response.content.decode()

    assert as_node(node_token).post(POLL, {}, format="json").status_code == 401
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.migrations.get().reason == "lost_node"
    response = enroll(body(token(), address="10.0.0.3"))  # the reinstalled host, with a fresh token
    assert response.status_code == 201
    node.refresh_from_db()
    assert node.agent_status == AgentStatus.ONLINE and node.address == "10.0.0.3"


def test_a_single_use_token_enrolls_one_host_only(catalog):
    raw = token()
    assert enroll(body(raw, hostname="gpu-1")).status_code == 201
    response = enroll(body(raw, hostname="gpu-2"))
    assert response.status_code == 403
    assert response.json()["code"] == "enrollment_token_used_up"
    assert "used up (1 of 1" in response.json()["detail"]
    assert not Node.objects.filter(hostname="gpu-2").exists()


def test_an_expired_token_is_refused_naming_when_it_expired(catalog):
    raw = token(lifetime=timedelta(hours=-1))
    response = enroll(body(raw))
    assert response.status_code == 403 and response.json()["code"] == "enrollment_token_expired"
    assert "expired at" in response.json()["detail"]
    assert not Node.objects.filter(hostname="gpu-1").exists()


def test_a_token_expires_a_day_after_issue_by_default(catalog):
    issued, _ = EnrollmentToken.issue(Pool.objects.get(chip_type__slug="rtx-4090"))
    assert abs(issued.expires_at - (timezone.now() + timedelta(hours=24))) < timedelta(minutes=1)
    assert (issued.max_uses, issued.approved_chips) == (1, 1)


def test_more_chips_than_approved_are_refused_naming_the_limit(catalog):
    raw = token(chips=2)
    response = enroll(body(raw, chips=8))
    assert response.status_code == 403 and response.json()["code"] == "chips_not_approved"
    assert "declared 8 chip(s)" in response.json()["detail"] and "at most 2" in response.json()["detail"]
    assert not Node.objects.filter(hostname="gpu-1").exists()
    assert EnrollmentToken.objects.get(token_hash=hash_token(raw)).uses == 0

    node_token = enroll(body(raw, chips=2)).json()["node_token"]
    again = enroll({**body(chips=4), "node_token": node_token})  # nor can the host raise it by renewing
    assert again.status_code == 403 and "at most 2" in again.json()["detail"]
    assert Node.objects.get(hostname="gpu-1").chips == 2


def test_an_enrollment_without_any_token_is_a_400_naming_the_field(catalog):
    response = enroll(body(""))
    assert response.status_code == 400 and "enrollment_token" in response.json()["errors"]


def test_the_operator_sets_uses_chips_and_expiry_of_a_token_and_sees_them(catalog, client, operator):
    client.force_login(operator)
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    # The console reads times in the operator's zone (Asia/Shanghai unless they chose another, docs/I18N.md).
    expires = timezone.localtime(timezone=zoneinfo.ZoneInfo(settings.DISPLAY_TIME_ZONE)) + timedelta(hours=2)
    response = client.post(
        "/admin/workers/enrollmenttoken/add/",
        {"pool": pool.pk, "name": "rack 7", "approved_chips": 8, "max_uses": 3,
         "expires_at_0": expires.strftime("%Y-%m-%d"), "expires_at_1": expires.strftime("%H:%M:%S")},
        follow=True,
    )  # fmt: skip
    page = response.content.decode()
    assert response.status_code == 200 and "shown once" in page and "--enrollment-token-file" in page
    issued = EnrollmentToken.objects.get(name="rack 7")
    assert (issued.max_uses, issued.approved_chips) == (3, 8)
    assert abs(issued.expires_at - expires) < timedelta(seconds=1)
    listing = client.get("/admin/workers/enrollmenttoken/").content.decode()
    assert "0 / 3" in listing


@pytest.mark.django_db(transaction=True)
def test_parallel_enrollments_never_spend_a_token_more_often_than_allowed(catalog):
    raw = token(max_uses=2)
    outcomes: list[str] = []

    def attempt(index: int) -> None:
        try:
            enroll_node(enrollment_token=raw, hostname=f"race-{index}", chip_type="rtx-4090", chips=1, simulated=True)
            outcomes.append("enrolled")
        except EnrollmentError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["enrolled"] * 2 + ["enrollment_token_used_up"] * 4
    assert Node.objects.filter(hostname__startswith="race-").count() == 2
    assert EnrollmentToken.objects.get().uses == 2


def test_no_command_is_queued_for_a_refused_enrollment(running_node):
    _, pool_token, _ = running_node
    commands = AgentCommand.objects.count()
    enroll(body(pool_token))
    assert AgentCommand.objects.count() == commands


# -- the token never travels on a command line ------------------------------------------------------


def agent_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STARVERSE_")}
    return subprocess.run(
        [sys.executable, "-m", "hosts.agent", "--platform", "http://127.0.0.1:9", "--simulate", "rtx-4090:1",
         "--once", *args],
        env={**clean, **(env or {})}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_token_given_as_an_argument_is_refused_saying_how_to_pass_it(tmp_path):
    done = agent_cli("--enrollment-token", "sve_secret", "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert "STARVERSE_ENROLLMENT_TOKEN" in done.stderr and "--enrollment-token-file" in done.stderr


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_token_file_others_can_read_is_refused_like_ssh_does(tmp_path, mode):
    path = tmp_path / "token"
    path.write_text("sve_secret\n")
    path.chmod(mode)
    done = agent_cli("--enrollment-token-file", str(path), "--data-dir", str(tmp_path / "agent"))
    assert done.returncode == 2 and f"chmod 600 {path}" in done.stderr


def command_lines(process: psutil.Process) -> list[str]:
    """The command lines of a process and everything it started, as `ps` shows them to any user."""
    return [" ".join(p.cmdline()) for p in [process, *process.children(recursive=True)]]


def wait_for_agent(process: psutil.Process) -> None:
    deadline = time.monotonic() + 30
    while process.cmdline()[1:3] != ["-m", "hosts.agent"]:  # exec'd from the shell
        assert time.monotonic() < deadline, "the agent did not start"
        time.sleep(0.1)


def test_a_test_stacks_agent_gets_its_token_in_its_environment_not_its_command_line(catalog, tmp_path):
    stack = Stack("http://127.0.0.1:9", tmp_path, dict(os.environ))
    started = stack.add_agent("ps-check", "rtx-4090", chips=1)
    try:
        process = psutil.Process(started.pid)
        wait_for_agent(process)
        raw = process.environ()["STARVERSE_ENROLLMENT_TOKEN"]
        assert raw.startswith("sve_")
        assert not [line for line in command_lines(process) if raw in line]
        assert EnrollmentToken.objects.get(token_hash=hash_token(raw)).approved_chips == 1
    finally:
        stack.stop_all()


def test_the_demo_fleet_passes_tokens_in_private_files_never_on_command_lines(catalog, tmp_path, settings):
    settings.DATA_DIR = tmp_path
    call_command("ensure_demo_fleet", stdout=io.StringIO())
    fleet = json.loads((tmp_path / "demo-fleet.json").read_text())
    commands = demo_fleet_processes({"STARVERSE_DATA_DIR": str(tmp_path)}, "http://127.0.0.1:9")
    for entry in fleet:
        token_file = Path(entry["token_file"])
        assert token_file.read_text().strip() == entry["token"]
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert entry["token"] not in commands[entry["hostname"]]
        issued = EnrollmentToken.objects.get(token_hash=hash_token(entry["token"]))
        assert (issued.max_uses, issued.approved_chips) == (1, entry["chips"])

    first = fleet[0]
    started = subprocess.Popen(
        f"exec {commands[first['hostname']]}", shell=True, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        process = psutil.Process(started.pid)
        wait_for_agent(process)
        assert "--enrollment-token-file" in process.cmdline()
        assert not [line for line in command_lines(process) if first["token"] in line]
    finally:
        os.killpg(started.pid, signal.SIGKILL)
        started.wait(timeout=30)


def test_the_demo_fleet_resets_a_host_whose_agent_lost_its_node_token(catalog, tmp_path, settings):
    settings.DATA_DIR = tmp_path
    call_command("ensure_demo_fleet", stdout=io.StringIO())
    kept, lost = json.loads((tmp_path / "demo-fleet.json").read_text())[:2]
    for entry in (kept, lost):
        enrolled = enroll_node(enrollment_token=entry["token"], hostname=entry["hostname"], chip_type=entry["chip"],
                               chips=entry["chips"], simulated=True)  # fmt: skip
        if entry is kept:  # this agent saved its node token; the other one's state is gone
            (tmp_path / "agents" / entry["hostname"] / "agent-state.json").write_text(
                json.dumps({"node_token": enrolled.token})
            )

    call_command("ensure_demo_fleet", stdout=io.StringIO())
    again = {entry["hostname"]: entry for entry in json.loads((tmp_path / "demo-fleet.json").read_text())}
    assert again[kept["hostname"]]["token"] == kept["token"]
    assert Node.objects.get(hostname=kept["hostname"]).token_hash
    fresh = again[lost["hostname"]]["token"]
    assert fresh != lost["token"] and Node.objects.get(hostname=lost["hostname"]).token_hash is None
    enroll_node(enrollment_token=fresh, hostname=lost["hostname"], chip_type=lost["chip"], chips=1, simulated=True)
