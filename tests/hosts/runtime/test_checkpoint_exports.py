"""Every checkpoint downloads as a model: an intermediate one holds its Hugging Face form (a full fine-tune's
model/, a LoRA job's adapter/) and reports the step's train loss and, where it was measured, the held-out loss.

Job F: a full fine-tune on 2 ranks (ZeRO 1), 6 steps, a checkpoint every 3 and an eval every 3.
Job L: a LoRA job on 1 rank, 4 steps, a checkpoint every 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hosts.runtime.local import metrics
from kernel.modelfiles.hfconfig import build_config
from kernel.modelspecs import CATALOG, resolve_model
from tests.support.ranks import TINY, run_job

LORA = {**TINY, "mode": "lora", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    full = run_job(
        root / "f", [3, 5], zero_stage=1, max_steps=6, checkpoint_every=3, eval_dataset="synthetic", eval_every=3
    )
    lora = run_job(root / "l", [4], model=LORA, zero_stage=0, max_steps=4, checkpoint_every=2)
    return {"full": full, "lora": lora, "root": root}


def saved(job) -> dict[int, dict]:
    return {e["step"]: e for e in job.events(0) if e["event"] == "checkpoint"}


def test_an_intermediate_checkpoint_loads_as_a_hugging_face_model(runs):
    from transformers import AutoModelForCausalLM

    step3, step6 = (Path(runs["root"]) / "f" / "checkpoints" / f"step-{n}" / "model" for n in (3, 6))
    middle = AutoModelForCausalLM.from_pretrained(step3)
    final = AutoModelForCausalLM.from_pretrained(step6)
    assert type(middle).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in middle.parameters()) == resolve_model("llama-tiny").parameters
    # Its own weights: step 3's, not the final ones.
    name, weight = next(iter(middle.state_dict().items()))
    assert not torch.equal(weight, final.state_dict()[name])
    assert not (step3.parent / "adapter").exists()


def test_checkpoint_events_carry_the_train_loss_and_the_eval_loss_measured_there(runs):
    job = runs["full"]
    events, losses = saved(job), metrics(job.events(0))
    assert sorted(events) == [3, 6]
    evals = {e["step"]: e["eval_loss"] for e in job.events(0) if e["event"] == "eval"}
    for step in (3, 6):
        assert events[step]["loss"] == pytest.approx(losses[step]["loss"])
        assert events[step]["eval_loss"] == pytest.approx(evals[step])


def test_an_intermediate_lora_checkpoint_holds_its_adapter_which_loads_on_the_base(runs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root = Path(runs["root"]) / "l" / "checkpoints"
    middle = root / "step-2"
    assert (middle / "adapter" / "adapter_model.safetensors").is_file()
    assert not (middle / "model").exists()  # the merged weights only with the final export
    assert (root / "step-4" / "model" / "model.safetensors").is_file()
    base = AutoModelForCausalLM.from_config(build_config(dict(CATALOG["llama-tiny"].config)))
    model = PeftModel.from_pretrained(base, str(middle / "adapter"))
    assert any("lora_A" in name for name, _ in model.named_parameters())
    assert saved(runs["lora"])[2]["eval_loss"] is None  # no held-out data
