"""The serving gateway with the official `openai` client against a live server, in front of a real engine
(`transformers serve` on a tiny Llama model): answers, streams, tokens counted and recorded, the user's
models, refusals in OpenAI's shape, a dead replica skipped before the first byte, and a cold start."""

from __future__ import annotations

import socket
import threading
import time

import openai
import pytest
from django.db import connection
from django.test import Client

from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, Job, ServedRequest
from hosts.serving.process import EngineProcess, free_port
from kernel.serving import READY, EngineLaunch
from openai_api import gateway_proxy
from portal.models import TokenScope
from workers.services import serving_load

NAME = "tiny-chat"
MAX_MODEL_LEN = 64
MESSAGES = [{"role": "user", "content": "the chip runs fast"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from tests.support.hfmodels import make_model_dir

    model = make_model_dir(tmp_path_factory.mktemp("gateway") / "model", family="llama")
    launch = EngineLaunch(
        model=str(model),
        served_model_name=NAME,
        port=free_port(),
        max_model_len=MAX_MODEL_LEN,
        simulated=True,
        chip_type="sim-a100",
        run_dir=str(tmp_path_factory.mktemp("replica")),
    )
    process = EngineProcess(launch).start()
    try:
        yield process.wait_ready(timeout_s=120)
    finally:
        process.stop()


def make_deployment(owner, name: str = NAME, status: str = DeploymentStatus.READY, **fields) -> Deployment:
    fields.setdefault("max_model_len", MAX_MODEL_LEN)
    return Deployment.objects.create(
        owner=owner, name=name, model_name="model:1", max_budget_per_hour=10**6, status=status, **fields
    )


def make_replica(deployment: Deployment, url: str | None, status: str = JobStatus.RUNNING) -> Job:
    serving = {"state": READY, "url": url, "epoch": 1, "simulated": True} if url else {"state": "starting"}
    return Job.objects.create(
        owner=deployment.owner,
        model_name=deployment.model_name,
        per_device_batch_size=1,
        max_steps=1,
        max_budget_per_hour=deployment.max_budget_per_hour,
        status=status,
        epoch=1,
        deployment=deployment,
        serving=serving,
    )


@pytest.fixture
def client_for(live_server, token_for):
    """The official client for a user, against the live server; closed after the test, so that the server's
    threads (a kept-alive connection each) close their database connections before the database goes."""
    clients = []

    def make(user) -> openai.OpenAI:
        base_url = live_server.url + "/v1"
        clients.append(openai.OpenAI(base_url=base_url, api_key=token_for(user), max_retries=0, timeout=60))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def served(alice, engine):
    """Alice's deployment with one ready replica: the engine."""
    deployment = make_deployment(alice)
    make_replica(deployment, engine.url)
    return deployment


def recorded(deployment: Deployment, count: int = 1) -> list[ServedRequest]:
    """The deployment's records, once `count` are written (after the answer is sent: wait a little, longer on a
    busy machine)."""
    deadline = time.monotonic() + 30
    while True:
        rows = list(deployment.served.order_by("started_at", "id"))
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def error_of(raised: pytest.ExceptionInfo) -> dict:
    body = raised.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def test_a_chat_completion_is_answered_counted_and_recorded(alice, served, client_for):
    raw = client_for(alice).chat.completions.with_raw_response.create(model=NAME, messages=MESSAGES, max_tokens=5)

    answer = raw.parse()
    assert answer.choices[0].message.role == "assistant" and answer.usage.completion_tokens == 5
    assert raw.headers["x-starverse-simulated"] == "true"
    [row] = recorded(served)
    replica = served.replicas.get()
    assert (row.replica_id, row.route, row.stream, row.status_code, row.cold_start) == (
        replica.pk,
        "chat",
        False,
        200,
        False,
    )
    assert (row.prompt_tokens, row.completion_tokens) == (answer.usage.prompt_tokens, 5)
    assert 0 < row.first_byte_ms <= row.duration_ms
    served.refresh_from_db()
    assert (served.requests, served.prompt_tokens, served.completion_tokens) == (1, row.prompt_tokens, 5)
    assert served.last_request_at is not None
    timing = server_timing(raw.headers["server-timing"])
    assert set(timing) == {"gateway", "engine"} and 0 < timing["gateway"] < row.duration_ms
    assert timing["engine"] > 0


def server_timing(header: str) -> dict[str, float]:
    """Server-Timing's metrics: name -> dur (ms)."""
    metrics = {}
    for metric in header.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        metrics[name] = float(dict(param.split("=", 1) for param in params)["dur"])
    return metrics


def test_a_streamed_chat_completion_passes_chunks_through_and_counts_its_usage(alice, served, client_for):
    with client_for(alice).chat.completions.with_streaming_response.create(
        model=NAME, messages=MESSAGES, max_tokens=6, stream=True
    ) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.headers["x-accel-buffering"] == "no"
        assert set(server_timing(raw.headers["server-timing"])) == {"gateway", "engine"}  # to the stream's headers
        chunks = list(raw.parse())

    assert chunks[-1].usage.completion_tokens == 6  # asked of the engine by the gateway, passed on as it came
    [row] = recorded(served)
    assert row.stream and row.status_code == 200 and row.completion_tokens == 6
    assert row.prompt_tokens == chunks[-1].usage.prompt_tokens > 0
    assert 0 < row.first_byte_ms <= row.duration_ms
    # How many text pieces a chunk carries depends on how far the engine's generating thread ran ahead of
    # its reader (a busy machine merges them), so the pieces are checked by what they add up to.
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    whole = client_for(alice).chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=6)
    assert streamed and streamed == whole.choices[0].message.content


def test_a_stream_is_counted_in_flight_until_the_client_goes(alice, served, client_for):
    before = serving_load.inflight().get(served.pk, 0)
    with client_for(alice).chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=40, stream=True) as stream:
        next(iter(stream))
        assert serving_load.inflight().get(served.pk, 0) == before + 1

    [row] = recorded(served)  # written once the server has closed the stream
    assert row.stream and row.status_code == 200
    assert serving_load.inflight().get(served.pk, 0) == before


def test_a_legacy_completion_is_answered_and_recorded(alice, served, client_for):
    answer = client_for(alice).completions.create(model=NAME, prompt="the chip runs", max_tokens=4)

    assert answer.usage.completion_tokens == 4
    [row] = recorded(served)
    assert row.route == "completions" and row.completion_tokens == 4


@pytest.mark.django_db
def test_models_lists_only_the_users_live_deployments(alice, bob, openai_for):
    mine = make_deployment(alice)
    make_deployment(alice, name="idle-one", status=DeploymentStatus.IDLE)
    make_deployment(alice, name="gone", status=DeploymentStatus.STOPPED)
    make_deployment(bob, name="bobs-chat")
    client = openai_for(alice)

    models = client.models.list()

    assert sorted(model.id for model in models) == ["idle-one", NAME]
    assert {(model.object, model.owned_by) for model in models} == {("model", "alice")}
    assert client.models.retrieve(NAME).created == int(mine.created_at.timestamp())
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("bobs-chat")


@pytest.mark.django_db
def test_another_users_deployment_or_an_unknown_model_is_a_404(alice, bob, openai_for):
    make_deployment(bob, name="bobs-chat")
    client = openai_for(alice)

    for model in ("bobs-chat", "no-such-model"):
        with pytest.raises(openai.NotFoundError) as raised:
            client.chat.completions.create(model=model, messages=MESSAGES)
        error = error_of(raised)
        assert error["code"] == "model_not_found" and error["param"] == "model" and model in error["message"]
    assert not ServedRequest.objects.exists()


@pytest.mark.django_db
def test_a_read_only_token_lists_models_but_gets_no_completion(alice, openai_for):
    make_deployment(alice)
    client = openai_for(alice, scope=TokenScope.READ_ONLY)

    assert [model.id for model in client.models.list()] == [NAME]
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client.chat.completions.create(model=NAME, messages=MESSAGES)
    assert error_of(raised)["code"] == "insufficient_permissions"


@pytest.mark.django_db
def test_a_bad_request_is_refused_naming_the_parameter_before_any_replica(alice, openai_for):
    make_deployment(alice)  # no replica: a request that got past the checks would wait for one
    chat, completions = openai_for(alice).chat.completions, openai_for(alice).completions
    for param, says, call in (
        ("max_tokens", "context length is 64", lambda: chat.create(model=NAME, messages=MESSAGES, max_tokens=65)),
        (
            "max_completion_tokens",
            "too large",
            lambda: chat.create(model=NAME, messages=MESSAGES, max_completion_tokens=99),
        ),
        ("max_tokens", "positive integer", lambda: completions.create(model=NAME, prompt="a", max_tokens=0)),
        ("messages", "non-empty list", lambda: chat.create(model=NAME, messages=[])),
    ):
        with pytest.raises(openai.BadRequestError) as raised:
            call()
        error = error_of(raised)
        assert (error["type"], error["param"]) == ("invalid_request_error", param) and says in error["message"], error
    assert not ServedRequest.objects.exists()


def test_an_engines_error_is_reshaped_into_openais(alice, served, client_for):
    too_long = [{"role": "user", "content": " ".join(["token"] * (MAX_MODEL_LEN * 2))}]

    with pytest.raises(openai.BadRequestError) as raised:
        client_for(alice).chat.completions.create(model=NAME, messages=too_long, max_tokens=5)

    error = error_of(raised)
    assert error["type"] == "invalid_request_error" and "max-model-len" in error["message"]
    [row] = recorded(served)
    assert row.status_code == 400 and row.completion_tokens == 0


@pytest.fixture
def hangup_url():
    """A replica that takes the connection and closes it without a byte of answer."""
    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up() -> None:
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            peer.close()

    threading.Thread(target=hang_up, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()


def test_a_request_goes_on_to_a_good_replica_when_others_fail_before_answering(
    alice, engine, hangup_url, client_for, monkeypatch
):
    deployment = make_deployment(alice)
    dead = make_replica(deployment, f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    hangup = make_replica(deployment, hangup_url)
    good = make_replica(deployment, engine.url)
    # the failing replicas first, as a random order sometimes has them
    monkeypatch.setattr(gateway_proxy, "in_random_order", lambda replicas: sorted(replicas, key=lambda r: r.job_id))

    raw = client_for(alice).chat.completions.with_raw_response.create(model=NAME, messages=MESSAGES, max_tokens=3)

    assert raw.headers["x-starverse-replica"] == str(good.pk) and raw.parse().usage.completion_tokens == 3
    [row] = recorded(deployment)
    assert row.replica_id == good.pk and row.status_code == 200
    assert dead.pk < hangup.pk < good.pk


@pytest.mark.django_db
def test_a_request_no_replica_answers_is_a_502(alice, hangup_url, openai_for):
    deployment = make_deployment(alice)
    make_replica(deployment, f"http://127.0.0.1:{free_port()}/v1")
    make_replica(deployment, hangup_url)
    before = serving_load.inflight().get(deployment.pk, 0)

    with pytest.raises(openai.InternalServerError) as raised:
        openai_for(alice).chat.completions.create(model=NAME, messages=MESSAGES)

    assert raised.value.status_code == 502 and error_of(raised)["code"] == "replica_unreachable"
    assert [row.status_code for row in recorded(deployment)] == [502]
    assert serving_load.inflight().get(deployment.pk, 0) == before


@pytest.mark.django_db
def test_a_cold_start_past_its_timeout_is_a_503_with_retry_after(alice, openai_for, settings):
    settings.SERVING_COLD_START_TIMEOUT_S = 0.5
    deployment = make_deployment(alice, status=DeploymentStatus.DEPLOYING)
    make_replica(deployment, None, status=JobStatus.PROVISIONING)  # starting: no new one is launched

    began = time.monotonic()
    with pytest.raises(openai.InternalServerError) as raised:
        openai_for(alice).chat.completions.create(model=NAME, messages=MESSAGES)

    assert 0.5 <= time.monotonic() - began < 5
    assert raised.value.status_code == 503 and int(raised.value.response.headers["retry-after"]) > 0
    assert error_of(raised)["code"] == "model_not_ready"
    [row] = recorded(deployment)
    assert row.cold_start and row.status_code == 503 and row.replica_id is None
    assert deployment.replicas.count() == 1


def test_a_request_waits_through_a_cold_start_for_the_first_ready_replica(alice, engine, client_for):
    deployment = make_deployment(alice, status=DeploymentStatus.DEPLOYING)
    replica = make_replica(deployment, None, status=JobStatus.PROVISIONING)

    def becomes_ready() -> None:
        time.sleep(0.6)
        Job.objects.filter(pk=replica.pk).update(
            status=JobStatus.RUNNING, serving={"state": READY, "url": engine.url, "epoch": 1}
        )
        connection.close()

    threading.Thread(target=becomes_ready).start()
    answer = client_for(alice).chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=2)

    assert answer.usage.completion_tokens == 2
    [row] = recorded(deployment)
    assert row.cold_start and row.status_code == 200 and row.replica_id == replica.pk
    assert row.first_byte_ms >= 600


@pytest.mark.django_db
def test_a_stopped_or_failed_deployment_is_refused_naming_its_status(alice, openai_for):
    make_deployment(alice, status=DeploymentStatus.STOPPED, status_reason="Deleted by its owner")
    make_deployment(alice, name="broken", status=DeploymentStatus.FAILED, status_reason="3 replicas failed")
    client = openai_for(alice)

    with pytest.raises(openai.ConflictError) as raised:
        client.chat.completions.create(model=NAME, messages=MESSAGES)
    assert error_of(raised)["code"] == "deployment_stopped" and "stopped" in error_of(raised)["message"]
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="broken", messages=MESSAGES)
    assert raised.value.status_code == 503 and "3 replicas failed" in error_of(raised)["message"]


@pytest.mark.django_db
def test_the_signed_in_browser_may_call_with_its_csrf_token(alice, served):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.cookies["csrftoken"] = secret = "a" * 32
    body = {"model": NAME, "messages": MESSAGES, "max_tokens": 2}

    refused = browser.post("/v1/chat/completions", body, content_type="application/json")
    answered = browser.post("/v1/chat/completions", body, content_type="application/json", HTTP_X_CSRFTOKEN=secret)

    assert refused.status_code == 403 and set(refused.json()["error"]) == {"message", "type", "param", "code"}
    assert answered.status_code == 200 and answered.json()["usage"]["completion_tokens"] == 2
    assert [row.status_code for row in served.served.all()] == [200]
