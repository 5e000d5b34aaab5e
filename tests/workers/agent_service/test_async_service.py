"""The async agent service (portal/asgi.py) answers the node agents as the sync views do.

Each test runs the service under a real uvicorn, in a thread of this process, on the test database,
and talks HTTP to it as an agent does. Timing is never asserted: a poll that a wake-up did not reach
answers with no command once its wait is over, so what it returns shows how it was woken.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from django.utils import timezone

from base.outage import forget_outages
from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node, Pool
from kernel.planner.types import Plan
from kernel.protocol import AGENT_API_PREFIX, CommandType
from launcher.processes import platform_processes
from workers.agent_service.app import AgentService
from workers.models import EnrollmentToken, JobLogLine
from workers.services import channel
from workers.services.commands import queue_for_node
from workers.services.enrollment import enroll_node
from workers.services.heartbeats import HeartbeatBatch
from workers.services.placement import allocate

LONG_WAIT_S = 20  # a poll the wake-up misses answers empty after this long, and the test fails


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class RunningService:
    """uvicorn serving a fresh AgentService on a free port, in a background thread."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.app = AgentService()
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, lifespan="on", log_level="warning", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, what="uvicorn to start")
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=LONG_WAIT_S + 10)

    def post(self, endpoint: str, body: dict, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.post(f"{AGENT_API_PREFIX}/{endpoint}/", json=body, headers=headers)

    def poll(self, token: str, wait_s: float = 0, **body) -> httpx.Response:
        return self.post("poll", {"wait_s": wait_s, **body}, token)

    def health(self) -> dict:
        return self.http.get("/healthz").json()

    def stop(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def long_polls(settings):
    settings.AGENT_POLL_WAIT_S = LONG_WAIT_S
    settings.AGENT_HEARTBEAT_FLUSH_S = 0.1


@pytest.fixture
def service(long_polls) -> Iterator[RunningService]:
    running = RunningService()
    wait_for(lambda: running.health()["listening"], what="the wake-up subscription")
    yield running
    running.stop()


@pytest.fixture
def enroll(catalog):
    """Enroll a simulated RTX 4090 node through the service layer; (node, node token)."""

    def make(hostname: str, chips: int = 1) -> tuple[Node, str]:
        pool = Pool.objects.get(chip_type__slug="rtx-4090")
        _, raw = EnrollmentToken.issue(pool, chips=chips)
        enrolled = enroll_node(
            enrollment_token=raw,
            hostname=hostname,
            chip_type="rtx-4090",
            chips=chips,
            simulated=True,
            address="127.0.0.1",
        )
        return enrolled.node, enrolled.token

    return make


@pytest.fixture
def alices_job(alice) -> Job:
    return Job.objects.create(
        owner=alice,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=10,
        max_budget_per_hour=28_000_000,
        status=JobStatus.PLANNING,
    )


def one_rank_on(node: Node) -> Plan:
    rank = {
        "chip": "rtx-4090",
        "node_id": node.pk,
        "hostname": node.hostname,
        "micro_batch": 4,
        "mode": "on_demand",
        "tokens_per_s": 1000.0,
        "simulated": True,
        "paced_tokens_per_s": 1000.0,
    }
    return Plan.from_dict({"zero_stage": 0, "ranks": [rank]})


def checkpoint_for(node: Node, alices_job: Job) -> int:
    """Queue a checkpoint command as the platform does (woken after commit); its id."""
    return queue_for_node(node.pk, alices_job, CommandType.CHECKPOINT, {"reason": "test"}, timezone.now()).pk


def poll_in_background(service: RunningService, token: str) -> tuple[threading.Thread, dict]:
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.update(service.poll(token, wait_s=LONG_WAIT_S).json()))
    thread.start()
    wait_for(lambda: service.health()["waiting_polls"] == 1, what="the poll to wait")
    return thread, answer


@pytest.mark.django_db(transaction=True)
def test_a_poll_returns_the_commands_already_pending(service, enroll, alices_job):
    node, token = enroll("pending-1")
    queued = checkpoint_for(node, alices_job)
    answer = service.poll(token, wait_s=LONG_WAIT_S)
    assert answer.status_code == 200
    body = answer.json()
    assert [command["id"] for command in body["commands"]] == [queued]
    assert body["commands"] == [
        {
            "id": queued,
            "type": "checkpoint",
            "job_id": alices_job.pk,
            "epoch": alices_job.epoch,
            "payload": {"reason": "test"},
        }
    ]
    assert body["address"] == "127.0.0.1"


@pytest.mark.django_db(transaction=True)
def test_a_command_queued_while_a_poll_waits_is_delivered_by_the_pubsub_wake_up(service, enroll, alices_job):
    node, token = enroll("waiting-1")
    channel.clear_wake(node.pk)
    thread, answer = poll_in_background(service, token)
    queued = checkpoint_for(node, alices_job)
    thread.join(timeout=LONG_WAIT_S + 10)
    assert [command["id"] for command in answer["commands"]] == [queued]
    assert service.health()["wakeups"] >= 1


@pytest.mark.django_db(transaction=True)
def test_a_wake_up_for_another_node_leaves_a_poll_waiting(service, enroll, alices_job):
    node, token = enroll("quiet-1")
    other, _ = enroll("busy-1")
    thread, answer = poll_in_background(service, token)
    checkpoint_for(other, alices_job)
    wait_for(lambda: service.health()["wakeups"] >= 1, what="the other node's wake-up")
    assert thread.is_alive() and not answer  # still waiting: no command of its own
    queued = checkpoint_for(node, alices_job)
    thread.join(timeout=LONG_WAIT_S + 10)
    assert [command["id"] for command in answer["commands"]] == [queued]


@pytest.mark.django_db(transaction=True)
def test_acks_are_recorded_and_an_acked_command_is_not_sent_again(service, enroll, alices_job):
    node, token = enroll("acks-1")
    done, refused = checkpoint_for(node, alices_job), checkpoint_for(node, alices_job)
    assert len(service.poll(token).json()["commands"]) == 2
    acks = [done, {"id": refused, "error": "stale epoch"}]
    assert service.poll(token, acks=acks).json()["commands"] == []
    statuses = dict(node.commands.values_list("pk", "status"))
    assert statuses == {done: "done", refused: "refused"}


@pytest.mark.django_db(transaction=True)
def test_missing_malformed_and_unknown_tokens_are_refused_with_401(service, enroll):
    for token, detail in [
        (None, "Authentication credentials were not provided."),
        ("sv_not-a-node-token", "Agent endpoints need a node token."),
        ("svn_unknown", "Invalid node token (enroll again)."),
    ]:
        answer = service.poll(token) if token else service.post("poll", {})
        assert (answer.status_code, answer.json()["detail"]) == (401, detail)
        assert answer.headers["www-authenticate"] == "Bearer"


@pytest.mark.django_db(transaction=True)
def test_re_enrolling_through_the_service_refuses_the_old_token_at_once(service, enroll):
    node, old = enroll("rotate-1")
    assert service.poll(old).status_code == 200  # now remembered by the service
    body = {"node_token": old, "hostname": node.hostname, "chip_type": "rtx-4090", "chips": 1, "simulated": True}
    enrolled = service.post("enroll", body)
    assert enrolled.status_code == 201 and enrolled.json()["node_id"] == node.pk
    assert service.poll(old).status_code == 401
    assert service.poll(enrolled.json()["node_token"]).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_reset_node_is_refused_within_the_auth_cache_time(settings, service, enroll):
    settings.AGENT_AUTH_CACHE_S = 0.5
    node, token = enroll("reset-1")
    service.app.tokens.ttl_s = settings.AGENT_AUTH_CACHE_S
    assert service.poll(token).status_code == 200
    Node.objects.filter(pk=node.pk).update(token_hash=None)  # the operator's reset
    wait_for(lambda: service.poll(token).status_code == 401, timeout=5, what="the old token to be refused")


@pytest.mark.django_db(transaction=True)
def test_a_malformed_poll_is_a_400_naming_the_field(service, enroll):
    _, token = enroll("bad-1")
    answer = service.poll(token, acks="x")
    assert answer.status_code == 400 and "acks" in answer.json()


@pytest.mark.django_db(transaction=True)
def test_polls_are_heartbeats_written_in_batches(service, enroll):
    node, token = enroll("beat-1")
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=None, health={})
    service.poll(token, health={"load": 3})
    beat = wait_for(
        lambda: Node.objects.filter(pk=node.pk, last_heartbeat_at__isnull=False).first(), what="the heartbeat flush"
    )
    assert beat.health == {"load": 3} and beat.agent_status == AgentStatus.ONLINE


@pytest.mark.django_db(transaction=True)
def test_a_report_is_ingested_and_a_stale_epoch_is_a_409(service, enroll, alices_job):
    node, token = enroll("report-1")
    allocate(alices_job, one_rank_on(node))
    alices_job.refresh_from_db()
    items = [{"kind": "log", "rank": 0, "line": "hello from rank 0"}]
    answer = service.post("report", {"job_id": alices_job.pk, "epoch": alices_job.epoch, "items": items}, token)
    assert (answer.status_code, answer.json()) == (200, {"accepted": 1})
    assert list(JobLogLine.objects.filter(job=alices_job).values_list("line", flat=True)) == ["hello from rank 0"]
    stale = service.post("report", {"job_id": alices_job.pk, "epoch": alices_job.epoch + 1, "items": items}, token)
    assert stale.status_code == 409


@pytest.mark.django_db(transaction=True)
def test_storage_urls_are_signed_within_the_grant_as_the_sync_view_signs_them(service, enroll, alices_job, alice, fund):
    node, _ = enroll("storage-1")
    fund(alice)
    allocate(alices_job, one_rank_on(node))
    grant = alices_job.commands.get(type="start").payload["ranks"][0]["storage_grant"]
    own = f"checkpoints/job-{alices_job.pk}/step-1/meta.json"

    signed = service.post("storage", {"method": "PUT", "keys": [own]}, grant)
    outside = service.post("storage", {"method": "PUT", "keys": ["datasets/1/x/data.txt"]}, grant)
    no_grant = service.post("storage", {"method": "PUT", "keys": [own]})
    malformed = service.post("storage", {"method": "PUT"}, grant)

    assert signed.status_code == 200 and set(signed.json()["urls"]) == {own}
    assert (outside.status_code, outside.json()["code"]) == (403, "outside_grant")
    assert no_grant.status_code == 401 and malformed.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_enrollment_answers_as_the_sync_view_does(service, catalog):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=2)
    body = {"enrollment_token": raw, "hostname": "fresh-1", "chip_type": "rtx-4090", "chips": 2, "simulated": True}
    answer = service.post("enroll", body)
    assert answer.status_code == 201
    assert answer.json()["address"] == "127.0.0.1" and answer.json()["address_source"] == "observed"
    assert answer.json()["poll_timeout_s"] == LONG_WAIT_S
    assert service.post("enroll", {**body, "hostname": "fresh-2", "enrollment_token": "sve_x"}).status_code == 403


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ("[" * 5000 + "]" * 5000, "non_field_errors", "too_deep"),
        ('{"hostname": "a\\u0000b"}', "hostname", "null_characters_not_allowed"),
        ('{"hostname": "\\ud800"}', "hostname", "surrogate_characters_not_allowed"),
    ],
    ids=["5,000-deep JSON", "a NUL", "a lone surrogate"],
)
def test_a_crafted_enrollment_body_is_a_400_naming_the_field(service, catalog, body, field, code):
    nodes = Node.objects.count()
    answer = service.http.post(
        f"{AGENT_API_PREFIX}/enroll/", content=body, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == code and field in answer.json()["errors"], answer.json()
    assert Node.objects.count() == nodes


@pytest.mark.django_db(transaction=True)
def test_with_redis_unreachable_a_waiting_poll_still_gets_its_command_by_reading_the_database(
    settings, long_polls, enroll, alices_job
):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    channel._redis.cache_clear()
    forget_outages()
    running = RunningService()
    try:
        node, token = enroll("no-redis-1")
        thread, answer = poll_in_background(running, token)
        assert running.health()["listening"] is False
        queued = checkpoint_for(node, alices_job)  # its wake-up is lost: Redis is down
        thread.join(timeout=LONG_WAIT_S + 10)
        assert [command["id"] for command in answer["commands"]] == [queued]
    finally:
        running.stop()
        channel._redis.cache_clear()
        forget_outages()


@pytest.mark.django_db(transaction=True)
def test_a_batched_heartbeat_keeps_a_draining_node_draining_and_skips_an_old_token(enroll):
    draining, _ = enroll("drain-1")
    rotated, _ = enroll("rotated-1")
    Node.objects.filter(pk=draining.pk).update(agent_status=AgentStatus.DRAINING, last_heartbeat_at=None)
    batch = HeartbeatBatch()
    batch.note(draining, {}, [], None)  # the cached node still says online: the row decides
    batch.note(rotated, {}, [], None)
    Node.objects.filter(pk=rotated.pk).update(token_hash="another", last_heartbeat_at=None)
    assert batch.flush() == 1
    draining.refresh_from_db()
    rotated.refresh_from_db()
    assert draining.agent_status == AgentStatus.DRAINING and draining.last_heartbeat_at is not None
    assert rotated.last_heartbeat_at is None


@pytest.mark.django_db(transaction=True)
def test_a_lost_node_heartbeats_at_once_and_comes_back_after_a_clean_return(enroll):
    node, _ = enroll("lost-1")
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.LOST)
    node.refresh_from_db()
    batch = HeartbeatBatch()
    batch.note(node, {}, [], None)
    assert batch.pending() == 0  # written by record_heartbeat, not batched
    node.refresh_from_db()
    assert node.agent_status == AgentStatus.ONLINE


def test_make_run_starts_the_agent_service_and_points_the_demo_agents_at_it(tmp_path):
    entry = {"token_file": str(tmp_path / "t"), "hostname": "demo-a", "chip": "rtx-4090", "chips": 1, "spot": False}
    (tmp_path / "demo-fleet.json").write_text(json.dumps([entry]))
    processes = platform_processes({"STARVERSE_DATA_DIR": str(tmp_path), "PORT": "8100", "AGENT_PORT": "8200"})
    assert "uvicorn portal.asgi:application" in processes["agents"] and "--port 8200" in processes["agents"]
    assert "--no-proxy-headers" in processes["agents"]  # X-Forwarded-For is believed only from TRUSTED_PROXIES
    assert "--platform http://127.0.0.1:8200 " in processes["demo-a"]
    default = platform_processes({"STARVERSE_DATA_DIR": str(tmp_path), "PORT": "8100"})
    assert "--port 8101" in default["agents"]
