"""The launch contract (kernel/serving.py) and each engine's command line and environment (no engine runs)."""

from __future__ import annotations

import json

import pytest

from hosts.serving.engines import command, environment, vllm_lora_rank
from hosts.serving.prepare import link_name
from kernel.serving import EngineLaunch, InvalidLaunch, default_engine


def launch(**changes) -> EngineLaunch:
    values = dict(model="/models/tiny", served_model_name="alice/tiny-chat", port=8123)
    return EngineLaunch(**{**values, **changes})


def test_vllm_serves_the_folder_under_the_deployments_name_on_its_port(tmp_path):
    argv = command(launch(engine="vllm", device="cuda:0", max_model_len=2048), tmp_path)
    assert argv[0].endswith("vllm") and argv[1:3] == ["serve", str(tmp_path)]
    assert argv[3:] == [
        "--served-model-name",
        "alice/tiny-chat",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--max-model-len",
        "2048",
    ]


def test_vllm_serves_a_lora_adapter_on_its_base_under_the_deployments_name(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 48}))
    argv = command(launch(engine="vllm", device="cuda:1"), tmp_path / "base", adapter)
    assert argv[argv.index("--served-model-name") + 1] == "alice/tiny-chat-base"
    assert "--enable-lora" in argv
    assert argv[argv.index("--lora-modules") + 1] == f"alice/tiny-chat={adapter}"
    assert argv[argv.index("--max-lora-rank") + 1] == "64"


def test_vllm_lora_rank_rounds_up_to_one_vllm_takes(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8}))
    assert vllm_lora_rank(tmp_path) == 16
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 1024}))
    with pytest.raises(ValueError, match="above vLLM's largest"):
        vllm_lora_rank(tmp_path)


def test_vllm_sees_only_the_launchs_device_and_nothing_downloads():
    env = environment(launch(engine="vllm", device="cuda:3"), base={"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["PATH"] == "/bin"


def test_transformers_serve_names_the_model_by_a_link_in_its_working_folder(tmp_path):
    argv = command(launch(max_model_len=64, host="0.0.0.0"), tmp_path / "ignored")
    assert argv[0].endswith("transformers") and argv[1:3] == ["serve", "alice/tiny-chat"]
    assert argv[argv.index("--device") + 1] == "cpu"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--max-model-len") + 1] == "64"
    model = tmp_path / "model"
    model.mkdir()
    link = link_name(tmp_path / "engine", "alice/tiny-chat", model)
    assert link == tmp_path / "engine" / "alice" / "tiny-chat" and link.resolve() == model.resolve()
    assert link_name(tmp_path / "engine", "alice/tiny-chat", model) == link  # a restart replaces its link
    env = environment(launch(), base={})
    assert env["HF_HUB_OFFLINE"] == "1" and "CUDA_VISIBLE_DEVICES" not in env


def test_transformers_serve_takes_no_adapter_unmerged(tmp_path):
    with pytest.raises(ValueError, match="merge"):
        command(launch(), tmp_path, tmp_path / "adapter")


@pytest.mark.parametrize(
    "changes, problem",
    [
        (dict(engine="tgi"), "engine"),
        (dict(served_model_name="../etc"), "served_model_name"),
        (dict(served_model_name="/abs"), "served_model_name"),
        (dict(served_model_name="a/b/c"), "served_model_name"),
        (dict(served_model_name="tiny:weights.gguf"), "served_model_name"),
        (dict(device="tpu"), "device"),
        (dict(engine="vllm"), "vLLM serves on CUDA"),
        (dict(simulated=True, device="cuda:0"), "simulated"),
        (dict(port=0), "port"),
        (dict(max_model_len=1), "max_model_len"),
        (dict(model=""), "no model"),
    ],
)
def test_a_launch_no_engine_can_serve_is_refused(changes, problem):
    with pytest.raises(InvalidLaunch, match=problem):
        launch(**changes).check()


def test_a_launch_travels_as_a_dict_and_ignores_what_it_does_not_know():
    original = launch(engine="vllm", device="cuda:0", adapter="store:checkpoints/job-5/step-40/adapter", replica=2)
    assert EngineLaunch.from_dict({**original.as_dict(), "newer_field": 1}) == original.check()


def test_cuda_hosts_serve_with_vllm_and_the_others_with_transformers():
    assert default_engine("cuda:0") == "vllm"
    assert default_engine("cpu") == "transformers"
    assert default_engine("cpu", simulated=True) == "transformers"
