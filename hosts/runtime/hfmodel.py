"""The network a rank trains: a transformers causal LM, whole or with a LoRA adapter (peft).

The launch file's `model` says where it comes from: a catalog config trained from scratch
(`path` None: random weights from the job's seed, the same on every rank) or a Hugging Face
directory on this host (`path`: config.json, safetensors weights, tokenizer) that the user
uploaded. Attention is PyTorch's SDPA; on CUDA DeepSpeed runs the model in bf16 with fp32
master weights, on a CPU everything stays fp32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kernel.modelfiles.hfconfig import build_config, lora_settings
from kernel.modelspecs import CATALOG, LORA, ModelSpec

IGNORE = -100


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter: rank r, scale alpha / r, dropout on its input, the modules it adapts."""

    r: int
    alpha: int
    dropout: float
    target_modules: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: Mapping | None) -> LoraSettings:
        """The job's settings, defaults filled in as the platform fills them (hfconfig.lora_settings)."""
        data = lora_settings(data)
        return cls(int(data["r"]), int(data["alpha"]), float(data["dropout"]), tuple(data["target_modules"]))

    def peft_config(self):
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class ModelSource:
    """What the launch file's `model` says about the network to build."""

    name: str
    config: dict
    seq_len: int
    path: str | None = None
    mode: str = "full"
    lora: LoraSettings | None = None
    gradient_checkpointing: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def is_lora(self) -> bool:
        return self.mode == LORA

    @classmethod
    def from_launch(cls, model: Mapping) -> ModelSource:
        """From RankLaunch.model; a bare catalog name's config is filled from the catalog."""
        config = model.get("config")
        if config is None:
            if model.get("name") not in CATALOG:
                raise ValueError(f"model '{model.get('name')}' has no config and is not in the catalog")
            config = CATALOG[model["name"]].config
        mode = model.get("mode", "full")
        return cls(
            name=model["name"],
            config=dict(config),
            seq_len=int(model["seq_len"]),
            path=model.get("path"),
            mode=mode,
            lora=LoraSettings.from_dict(model.get("lora")) if mode == LORA else None,
            gradient_checkpointing=bool(model.get("gradient_checkpointing", False)),
        )


def build_model(source: ModelSource, seed: int) -> torch.nn.Module:
    """The model in fp32 with SDPA attention; LoRA wraps it with only the adapter trainable."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)  # the same initial weights (and LoRA A matrices) on every rank
    if source.path:
        model = AutoModelForCausalLM.from_pretrained(
            source.path, dtype=torch.float32, attn_implementation="sdpa", local_files_only=True
        )
    else:
        model = AutoModelForCausalLM.from_config(build_config(source.config), attn_implementation="sdpa")
        model.to(torch.float32)
    model.config.use_cache = False
    if source.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if source.is_lora:
        from peft import get_peft_model

        if source.gradient_checkpointing:
            model.enable_input_require_grads()
        model = get_peft_model(model, source.lora.peft_config())
    return model


def token_loss_sum(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of next-token cross-entropy over the target tokens the mask keeps, and how many there are.

    `ids` and `mask` are (batch, seq_len + 1): position t of the input predicts id t + 1, which counts
    when mask[t + 1] is set. A sum, not a mean, so ranks with different micro-batches (and different
    numbers of loss tokens) combine exactly.
    """
    inputs, targets = ids[:, :-1], ids[:, 1:].masked_fill(~mask[:, 1:], IGNORE)
    logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return loss, int(mask[:, 1:].sum())


def count_trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def spec_from_dict(model: Mapping) -> ModelSpec:
    """The ModelSpec a launch file carries (`ModelSpec.as_dict()` plus the source's keys, which are ignored)."""
    names = {f.name for f in dataclasses.fields(ModelSpec)}
    required = {f.name for f in dataclasses.fields(ModelSpec) if f.default is dataclasses.MISSING}
    missing = sorted(required - set(model))
    if missing:
        raise ValueError(f"model spec is missing {', '.join(missing)}")
    return ModelSpec(**{key: value for key, value in model.items() if key in names})
