"""`transformers serve` on a tiny Llama model, driven with the official `openai` client: the CPU and simulated
hosts' engine, started, health-checked and stopped by hosts/serving/process.py."""

from __future__ import annotations

import openai
import pytest

from hosts.serving.process import EngineFailed, EngineProcess, free_port, group_alive
from kernel.serving import FAILED, READY, STOPPED, EngineLaunch

NAME = "alice/tiny-chat"
MAX_MODEL_LEN = 64
MESSAGES = [{"role": "user", "content": "the chip runs fast"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tmp_path_factory):
    launch = EngineLaunch(
        model=str(tiny_model_dir),
        served_model_name=NAME,
        port=free_port(),
        max_model_len=MAX_MODEL_LEN,
        simulated=True,
        chip_type="sim-a100",
        deployment_id=7,
        run_dir=str(tmp_path_factory.mktemp("replica")),
    )
    engine = EngineProcess(launch).start()
    try:
        yield engine.wait_ready(timeout_s=120)
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def client(engine):
    return openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0, timeout=60)


def test_the_engine_is_ready_and_says_it_serves_on_a_simulated_chip(engine):
    status = engine.status()
    assert status.state == READY and status.engine == "transformers"
    assert status.simulated is True and status.device == "cpu"
    assert status.served_model_name == NAME and status.url == engine.url and status.pid


def test_models_lists_the_deployments_name(client):
    assert [model.id for model in client.models.list()] == [NAME]


def test_a_chat_completion_counts_its_usage(client):
    answer = client.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=5)
    assert answer.model == NAME and answer.choices[0].message.role == "assistant"
    assert answer.usage.completion_tokens == 5 and answer.usage.prompt_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_a_streamed_chat_completion_arrives_in_chunks_with_its_usage_last(client):
    stream = client.chat.completions.create(
        model=NAME, messages=MESSAGES, max_tokens=6, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    # How many text pieces a chunk carries depends on how fast the generating thread ran ahead of the
    # reader (a busy machine merges them), so the pieces are checked by what they add up to: the same
    # greedy answer the unstreamed call gives.
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    whole = client.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=6)
    assert streamed and streamed == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 6 and not chunks[-1].choices


def test_a_prompt_over_the_models_length_is_a_bad_request(client):
    too_long = [{"role": "user", "content": " ".join(["token"] * (MAX_MODEL_LEN * 2))}]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=NAME, messages=too_long, max_tokens=5)
    # transformers answers {"detail": ...}, not OpenAI's {"error": {...}}: the gateway reshapes it (docs/SERVING.md)
    assert raised.value.status_code == 400 and "max-model-len" in raised.value.response.json()["detail"]


def test_a_model_it_does_not_serve_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="bob/other", messages=MESSAGES, max_tokens=5)


def test_stopping_ends_the_engines_whole_process_group(engine):
    pgid = engine.status().pid
    assert group_alive(pgid)
    assert engine.stop(grace_s=10).state == STOPPED
    assert not group_alive(pgid)
    assert engine.status().state == STOPPED and not engine.healthy()


def test_an_engine_without_its_model_fails_with_the_reason(tmp_path):
    launch = EngineLaunch(
        model=str(tmp_path / "missing"), served_model_name="x", port=free_port(), run_dir=str(tmp_path)
    )
    engine = EngineProcess(launch).start()
    with pytest.raises(EngineFailed, match="does not exist"):
        engine.wait_ready(timeout_s=5)
    assert engine.status().state == FAILED
