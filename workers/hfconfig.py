"""Hugging Face model configs: which architectures train here, and their exact shapes.

Shared by the platform (upload checks, planning) and the runtime. torch and transformers are
imported inside the functions, so importing this module stays cheap.

The exact numbers come from instantiating the config on torch's meta device: no memory is
allocated and no weights are initialised, yet every parameter has its real shape, so a 70B
config is counted in a few seconds and a tiny one in milliseconds.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass

# model_type -> the transformers class a config.json of that type must name.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
# LoRA adapts every projection of attention and the MLP unless the job names others; these three
# families name them alike.
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_DEFAULTS = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": list(DEFAULT_LORA_TARGETS)}


def lora_settings(chosen: Mapping | None) -> dict:
    """A job's LoRA settings with the defaults filled in: r, alpha, dropout, target_modules."""
    settings = {**LORA_DEFAULTS, **{key: value for key, value in (chosen or {}).items() if value is not None}}
    settings["target_modules"] = list(settings["target_modules"])
    return settings


class UnsupportedModel(ValueError):
    """A config this platform can't train; the message names what is wrong and what would do."""


@dataclass(frozen=True)
class ModelShape:
    """What planning needs of a config: its exact parameter count and its linear layers.

    `linears` maps a module's short name (q_proj, down_proj...) to (in_features, out_features,
    how many modules of that name), which is all a LoRA parameter count needs.
    """

    parameters: int
    linears: Mapping[str, tuple[int, int, int]]

    def lora_parameters(self, rank: int, targets: tuple[str, ...] | list[str]) -> int:
        """Trainable parameters of a LoRA adapter of this rank on the named modules (A and B matrices)."""
        return sum(
            rank * (fan_in + fan_out) * count
            for name, (fan_in, fan_out, count) in self.linears.items()
            if name in targets
        )

    def as_dict(self) -> dict:
        return {"parameters": self.parameters, "linears": {k: list(v) for k, v in self.linears.items()}}

    @classmethod
    def from_dict(cls, data: Mapping) -> ModelShape:
        return cls(int(data["parameters"]), {k: tuple(v) for k, v in data["linears"].items()})


def model_type(config: Mapping) -> str:
    """The config's model_type, checked against the supported architectures."""
    kind = config.get("model_type")
    supported = ", ".join(f"{name} ({cls})" for name, cls in ARCHITECTURES.items())
    if kind not in ARCHITECTURES:
        named = kind or ", ".join(config.get("architectures") or []) or "none given"
        raise UnsupportedModel(f"Unsupported model architecture '{named}'. Supported: {supported}.")
    declared = config.get("architectures") or [ARCHITECTURES[kind]]
    if ARCHITECTURES[kind] not in declared:
        raise UnsupportedModel(
            f"config.json declares {', '.join(declared)} for model_type '{kind}'; "
            f"only causal language models ({ARCHITECTURES[kind]}) can be trained here."
        )
    return kind


def build_config(config: Mapping):
    """A transformers PretrainedConfig from a config.json mapping."""
    from transformers import AutoConfig

    kind = model_type(config)
    fields = {key: value for key, value in config.items() if key not in ("model_type", "transformers_version")}
    try:
        return AutoConfig.for_model(kind, **fields)
    except (TypeError, ValueError) as error:
        raise UnsupportedModel(f"config.json is not a valid {kind} config: {error}") from None


def meta_model(config: Mapping):
    """The model of this config on the meta device: real shapes, no memory."""
    import torch
    from transformers import AutoModelForCausalLM

    hf_config = build_config(config)
    with torch.device("meta"):
        try:
            return AutoModelForCausalLM.from_config(hf_config)
        except (RuntimeError, ValueError, TypeError, AssertionError) as error:
            raise UnsupportedModel(f"config.json describes a model that can't be built: {error}") from None


def parameter_shapes(config: Mapping) -> dict[str, tuple[int, ...]]:
    """Every tensor the saved weights must hold, by name (tied weights saved once, as save_pretrained does)."""
    return _cached(_canonical(config))[0]


def model_shape(config: Mapping) -> ModelShape:
    """Exact parameter count and linear layers of a config (cached per distinct config)."""
    return _cached(_canonical(config))[1]


def _canonical(config: Mapping) -> str:
    return json.dumps(dict(config), sort_keys=True, default=str)


@functools.lru_cache(maxsize=64)
def _cached(config_json: str) -> tuple[dict[str, tuple[int, ...]], ModelShape]:
    import torch

    model = meta_model(json.loads(config_json))
    tied = set()
    if getattr(model.config, "tie_word_embeddings", False):
        tied = {"lm_head.weight"}
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items() if name not in tied}
    parameters = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    linears: dict[str, tuple[int, int, int]] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            short = name.rsplit(".", 1)[-1]
            fan_in, fan_out, count = linears.get(short, (module.in_features, module.out_features, 0))
            linears[short] = (fan_in, fan_out, count + 1)
    return shapes, ModelShape(parameters, linears)
