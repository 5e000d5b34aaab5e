"""A LoRA job resumes on another mix of chips as full training does: adapter and optimizer state carried over.

Job L trains a LoRA adapter on llama-tiny for 12 steps on 2 ranks without ZeRO, checkpointing at
step 6. M resumes step 6 on 3 ranks under ZeRO 1 (converted to the universal form). With dropout
off and the same global batch, it must reproduce L's losses step for step. The checkpoints hold
only the adapter: the frozen base is never copied.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hosts.runtime.local import metrics
from tests.support.ranks import TINY, run_job

pytestmark = pytest.mark.slow
LORA = {**TINY, "mode": "lora", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    first = run_job(root / "l", [3, 5], model=LORA, zero_stage=0, max_steps=12, checkpoint_every=6)
    step6 = str(root / "l" / "checkpoints" / "step-6")
    m = run_job(root / "m", [1, 2, 5], model=LORA, zero_stage=1, max_steps=12, resume_from=step6)
    return {"l": first, "m": m, "root": root}


def losses(job) -> dict[int, float]:
    return {step: event["loss"] for step, event in metrics(job.events(0)).items()}


def test_a_lora_job_resumed_on_another_mix_reproduces_the_uninterrupted_losses(lora_runs):
    reference, resumed = losses(lora_runs["l"]), losses(lora_runs["m"])
    assert sorted(resumed) == list(range(7, 13))
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), step
    assert "resumed universal from" in lora_runs["m"].stderr_path(0).read_text()
    assert reference[12] < reference[1]  # the adapter learns


def test_lora_checkpoints_hold_the_adapter_only_and_export_both_forms(lora_runs):
    step6 = Path(lora_runs["root"]) / "l" / "checkpoints" / "step-6" / "ds" / "mp_rank_00_model_states.pt"
    module = torch.load(step6, map_location="cpu", weights_only=False)["module"]
    assert module and all("lora_" in name for name in module)
    final = Path(lora_runs["root"]) / "m" / "checkpoints" / "step-12"
    assert (final / "adapter" / "adapter_model.safetensors").is_file()
    assert (final / "adapter" / "adapter_config.json").is_file()
    assert (final / "model" / "model.safetensors").is_file()
