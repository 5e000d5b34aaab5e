"""A LoRA adapter on `transformers serve`: merged into its base with peft (its own process), then served."""

from __future__ import annotations

import openai
import pytest

from hosts.serving.process import EngineProcess, free_port, group_alive
from kernel.serving import EngineLaunch

pytestmark = pytest.mark.slow  # a merge, then an engine start: about 30 s on two cores


def make_adapter(base, directory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(base)), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"])
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()  # a trained adapter: B is no longer zero, so the merge changes the weights
    model.save_pretrained(str(directory))
    return directory


def test_an_adapter_is_merged_into_a_temporary_folder_served_and_removed_at_stop(tiny_model_dir, tmp_path):
    adapter = make_adapter(tiny_model_dir, tmp_path / "adapter")
    launch = EngineLaunch(
        model=str(tiny_model_dir),
        adapter=str(adapter),
        served_model_name="tiny-lora",
        port=free_port(),
        run_dir=str(tmp_path / "replica"),
    )
    engine = EngineProcess(launch).start()
    try:
        engine.wait_ready(timeout_s=180)
        [merged] = engine._temporary
        assert (merged / "model.safetensors").exists() and (merged / "tokenizer.json").exists()
        assert (tmp_path / "replica" / "engine" / "tiny-lora").resolve() == merged.resolve()
        client = openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0, timeout=60)
        answer = client.chat.completions.create(
            model="tiny-lora", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert answer.usage.completion_tokens == 3
    finally:
        engine.stop()
    assert not group_alive(engine.process.pid) and not merged.exists()
