"""The SDK's and the CLI's deployments against a live server: deploy, list, scale, wait, delete, and chat through
the platform's gateway to a stand-in engine (an OpenAI-shaped HTTP server on this machine)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import starverse
from starverse import cli
from starverse.serving import default_name, model_reference

from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, Job
from kernel.serving import READY
from tests.support.deployments import servable_model

CHUNKS = ["Hel", "lo", " there"]
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    """No URL, key or config file of the machine."""
    for variable in ("STARVERSE_URL", "STARVERSE_API_KEY", "STARVERSE_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def token(alice, fund, token_for, small_fleet, no_celery) -> str:
    """Alice's token, with credit and three simulated chips online; launched replicas stay queued."""
    fund(alice)
    return token_for(alice)


@pytest.fixture
def sdk(live_server, token) -> starverse.Client:
    with starverse.Client(live_server.url, token, backoff=0.01) as client:
        yield client


@pytest.fixture
def configured(monkeypatch, live_server, token) -> None:
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", token)


@pytest.fixture
def model(alice) -> str:
    return servable_model(alice).reference


class Engine(BaseHTTPRequestHandler):
    """A replica's engine as the gateway sees one: /v1/chat/completions, whole or as server-sent events."""

    received: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(body)
        if not body.get("stream"):
            return self.send(200, "application/json", json.dumps(completion(body)).encode())
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        events += [{"choices": [{"index": 0, "delta": {"content": text}}]} for text in CHUNKS]
        events += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, {"choices": [], "usage": USAGE}]
        sse = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
        self.send(200, "text/event-stream", sse.encode())

    def send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def completion(body: dict) -> dict:
    message = {"role": "assistant", "content": "".join(CHUNKS)}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
        "usage": USAGE,
    }


@pytest.fixture
def engine():
    Engine.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def make_ready(deployment_id: int, url: str) -> Job:
    """The deployment's replica as running with its engine ready at `url` (what the agent's reports make it)."""
    replica = Job.objects.filter(deployment_id=deployment_id).first()
    replica.status, replica.epoch = JobStatus.RUNNING, 1
    replica.serving = {"state": READY, "url": url, "epoch": 1, "engine": "transformers", "simulated": True}
    replica.save(update_fields=["status", "epoch", "serving"])
    Deployment.objects.filter(pk=deployment_id).update(status=DeploymentStatus.READY)
    return replica


def starverse_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the SDK ---------------------------------------------------------------------------------------


def test_a_job_id_is_its_trained_model_and_names_it():
    assert model_reference(42) == model_reference("42") == "job:42"
    assert model_reference("model:7") == "model:7" and model_reference("job:3") == "job:3"
    assert default_name("job:42") == "job-42" and default_name("org/name") == "org-name"


def test_deploy_returns_a_typed_deployment_that_scales_and_deletes(sdk, model):
    deployment = sdk.deploy(model, "tiny-chat", max_budget="5", min_replicas=1, max_replicas=2)

    assert isinstance(deployment, starverse.Deployment) and deployment["name"] == "tiny-chat"
    assert (deployment.status, deployment.model, str(deployment.max_budget)) == ("deploying", model, "5.00")
    assert deployment.base_url == f"{sdk.url}/v1"
    assert [replica.status for replica in deployment.replicas] == ["queued"]
    assert deployment.scale(min_replicas=2) is deployment and len(deployment.replicas) == 2
    assert deployment.min_replicas == 2 == Deployment.objects.get().min_replicas
    deployment.delete()
    assert deployment.status == "stopped"
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.CANCELLED}


def test_deployments_are_listed_and_found_by_name_or_id(sdk, model):
    first = sdk.deploy(model, "first", min_replicas=0)
    second = sdk.deploy(model, "second", min_replicas=0)

    assert [item.name for item in starverse.deployments(client=sdk)] == ["second", "first"]
    assert sdk.deployment("first").id == first.id and sdk.deployment(second.id).name == "second"
    with pytest.raises(starverse.NotFound):
        sdk.deployment("nobody")


def test_a_refusal_is_a_validation_error_naming_the_field(sdk):
    with pytest.raises(starverse.ValidationError) as raised:
        sdk.deploy("llama-tiny", "catalog")

    assert raised.value.field == "model" and raised.value.code == "model_not_servable"


def test_wait_ready_returns_once_a_replica_answers(sdk, model, engine):
    deployment = sdk.deploy(model, "tiny-chat")
    make_ready(deployment.id, engine)

    assert deployment.wait_ready(timeout=10, poll=0.05).status == "ready"
    assert deployment.replicas[0].serving_state == "ready" and deployment.replicas[0].simulated


def test_wait_ready_says_a_deployment_scaled_to_zero_starts_on_a_request(sdk, model):
    deployment = sdk.deploy(model, "tiny-chat", min_replicas=0)

    with pytest.raises(starverse.StarverseError, match="scaled to zero"):
        deployment.wait_ready(timeout=1)


def test_wait_ready_raises_for_a_stopped_deployment(sdk, model):
    deployment = sdk.deploy(model, "tiny-chat")
    Deployment.objects.filter(pk=deployment.id).update(status=DeploymentStatus.FAILED, status_reason="engine died")

    with pytest.raises(starverse.DeploymentFailed, match="engine died"):
        deployment.wait_ready(timeout=1)


# -- chat, through the gateway ---------------------------------------------------------------------


def test_chat_answers_the_text_with_its_usage(sdk, model, engine):
    deployment = sdk.deploy(model, "tiny-chat")
    make_ready(deployment.id, engine)

    reply = deployment.chat([{"role": "user", "content": "hi"}], max_tokens=3, temperature=0.5)

    assert reply == "Hello there" and isinstance(reply, str)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.finish_reason) == (7, 3, "length")
    assert Engine.received[-1] == {
        "model": "tiny-chat",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "max_tokens": 3,
        "temperature": 0.5,
    }
    assert deployment.refresh().requests == 1 and deployment.completion_tokens == 3


def test_chat_streams_text_deltas_and_keeps_the_usage(sdk, model, engine):
    deployment = sdk.deploy(model, "tiny-chat")
    make_ready(deployment.id, engine)

    answer = deployment.chat([{"role": "user", "content": "hi"}], stream=True)

    assert list(answer) == CHUNKS and answer.text == "Hello there"
    assert answer.usage == starverse.Usage(7, 3, 10) and answer.finish_reason == "stop"
    assert Engine.received[-1]["stream"] is True


def test_chat_with_a_stopped_deployment_is_a_conflict_naming_why(sdk, model):
    deployment = sdk.deploy(model, "tiny-chat").delete()

    with pytest.raises(starverse.Conflict) as raised:
        deployment.chat([{"role": "user", "content": "hi"}])

    assert raised.value.code == "deployment_stopped" and "stopped" in str(raised.value)


def test_chat_with_an_unknown_model_is_not_found(sdk):
    with pytest.raises(starverse.NotFound) as raised:
        list(sdk.chat("nobody", [{"role": "user", "content": "hi"}], stream=True))

    assert raised.value.code == "model_not_found"


def test_a_bad_parameter_is_a_validation_error_naming_it(sdk, model, engine):
    deployment = sdk.deploy(model, "tiny-chat", max_model_len=16)
    make_ready(deployment.id, engine)

    with pytest.raises(starverse.ValidationError) as raised:
        deployment.chat([{"role": "user", "content": "hi"}], max_tokens=100)

    assert raised.value.field == "max_tokens"


# -- the CLI ---------------------------------------------------------------------------------------


def test_the_cli_deploys_lists_scales_and_deletes(capsys, configured, model):
    code, out, err = starverse_cli(capsys, "deploy", model, "--name", "tiny-chat", "--min-replicas", "0")
    assert code == 0, err
    assert "tiny-chat" in out and "idle" in out and "/v1/chat/completions" in err

    code, out, _ = starverse_cli(capsys, "deployments")
    assert code == 0 and "tiny-chat" in out and "0/0 (0-1)" in out

    code, out, _ = starverse_cli(capsys, "deployments", "scale", "tiny-chat", "--max-replicas", "3", "--json")
    assert code == 0 and json.loads(out)["max_replicas"] == 3

    code, out, _ = starverse_cli(capsys, "deployments", "delete", "tiny-chat")
    assert code == 0 and "stopped" in out
    assert Deployment.objects.get().status == DeploymentStatus.STOPPED


def test_the_cli_takes_a_job_id_as_that_jobs_model(capsys, configured):
    code, _, err = starverse_cli(capsys, "deploy", "999999")

    assert code == 1 and "job:999999" in err


def test_the_cli_chats_with_a_deployment(capsys, configured, sdk, model, engine):
    make_ready(sdk.deploy(model, "tiny-chat").id, engine)

    code, out, err = starverse_cli(capsys, "chat", "tiny-chat", "hi", "--max-tokens", "3")

    assert code == 0 and out == "Hello there\n" and "7 prompt + 3 completion tokens" in err
