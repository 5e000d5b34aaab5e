"""Hugging Face model configs: which architectures train here, and their exact shapes.

Shared by the platform (upload checks, planning) and the runtime. No torch: the web tier runs
without it. transformers is imported inside the functions (its configs need no torch), so
importing this module stays cheap.

The exact shapes are worked out from the config, the way transformers' Llama, Mistral and Qwen2
classes lay out their weights: every tensor's name and shape, so a 70B config is counted in
milliseconds. tests/kernel/modelfiles/test_model_shapes.py checks them against the model built on torch's meta device.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from kernel.modelspecs import CATALOG
from kernel.words import Words

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

_FIRST_IMPORT = threading.Lock()


def import_transformers() -> ModuleType:
    """transformers, imported by one thread at a time: imported by several threads at once (a web
    worker's first requests), its lazy module left all but one of them "cannot import name
    'AutoConfig' from 'transformers'". Once imported, this costs one uncontended lock."""
    with _FIRST_IMPORT:
        import transformers
    return transformers


def lora_settings(chosen: Mapping | None) -> dict:
    """A job's LoRA settings with the defaults filled in: r, alpha, dropout, target_modules."""
    settings = {**LORA_DEFAULTS, **{key: value for key, value in (chosen or {}).items() if value is not None}}
    settings["target_modules"] = list(settings["target_modules"])
    return settings


class UnsupportedModel(ValueError):
    """A config this platform can't train; the message names what is wrong and what would do.

    Made with `of(template, **values)`, it keeps its English template and values beside the message, as
    kernel.modelfiles.errors.ModelFileError does, so the platform can say it in the reader's language.
    """

    def __init__(self, message: str, template: str = "", values: dict | None = None) -> None:
        super().__init__(message)
        self.template, self.values = template, dict(values or {})

    @classmethod
    def of(cls, template: str, **values) -> UnsupportedModel:
        return cls(template % values, template, values)


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
        named = kind or ", ".join(config.get("architectures") or []) or Words("none given")
        raise UnsupportedModel.of(
            "Unsupported model architecture '%(named)s'. Supported: %(supported)s.", named=named, supported=supported
        )
    declared = config.get("architectures") or [ARCHITECTURES[kind]]
    if ARCHITECTURES[kind] not in declared:
        raise UnsupportedModel.of(
            "config.json declares %(declared)s for model_type '%(kind)s'; "
            "only causal language models (%(causal)s) can be trained here.",
            declared=", ".join(declared),
            kind=kind,
            causal=ARCHITECTURES[kind],
        )
    return kind


def check_sizes(config: Mapping) -> None:
    """Refuse a config whose layers, widths, heads or vocabulary pass MAX_SIZES, before anything is built from it.

    transformers builds lists per layer from a config (Qwen2's layer_types), and the layout below a dict of
    tensors per layer: a 6 KB upload whose num_hidden_layers was huge once grew a web worker by 848 MiB."""
    for field, bound in MAX_SIZES.items():
        value = config.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
            raise UnsupportedModel.of(
                "config.json's %(field)s is %(value)s; models trained here have at most %(bound)s (four times the "
                "catalog's largest model, %(largest)s, and eight times its vocabulary).",
                field=field,
                value=f"{value:,}",
                bound=f"{bound:,}",
                largest=LARGEST.name,
            )


def build_config(config: Mapping):
    """A transformers PretrainedConfig from a config.json mapping (its sizes checked first: check_sizes)."""
    from huggingface_hub.errors import StrictDataclassError

    check_sizes(config)
    auto_config = import_transformers().AutoConfig
    kind = model_type(config)
    fields = {key: value for key, value in config.items() if key not in ("model_type", "transformers_version")}
    try:
        return auto_config.for_model(kind, **fields)
    except (TypeError, ValueError, ArithmeticError, StrictDataclassError) as error:
        raise UnsupportedModel.of(
            "config.json is not a valid %(kind)s config: %(error)s", kind=kind, error=str(error)
        ) from None


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
    config = json.loads(config_json)
    kind = model_type(config)
    decoder = decoder_of(kind, build_config(config))
    shapes = decoder.tensor_shapes()
    parameters = sum(math.prod(shape) for shape in shapes.values())  # a tied lm_head is counted once
    linears = {name: (fan_in, fan_out, decoder.layers) for name, fan_in, fan_out, _ in decoder.layer_linears()}
    return shapes, ModelShape(parameters, linears)


# -- the decoder's layout ----------------------------------------------------------------------------

# Activations without weights of their own (transformers' ACT2CLS less prelu and xielu, which learn
# parameters): the parameter count of a config with any of these is the layout's.
ACTIVATIONS = (
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
    "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2",
    "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh",
)  # fmt: skip
# The largest sizes a config may have: four times the catalog's largest model (llama-2-70b: 80 layers,
# 8,192 wide, 64 heads) and eight times its 32,000-token vocabulary. That holds every open model of these
# families (Llama 3.1 405B: 126 layers, 16,384 wide, 128 heads; Qwen2: 152,064 tokens); the platform's
# services also check the parameter count against the fleet's chips.
LARGEST = max(CATALOG.values(), key=lambda model: model.config["hidden_size"] * model.config["num_hidden_layers"])
MAX_SIZES = {
    "num_hidden_layers": 4 * LARGEST.config["num_hidden_layers"],
    "hidden_size": 4 * LARGEST.config["hidden_size"],
    "intermediate_size": 4 * LARGEST.config["intermediate_size"],
    "num_attention_heads": 4 * LARGEST.config["num_attention_heads"],
    "num_key_value_heads": 4 * LARGEST.config["num_attention_heads"],
    "head_dim": 4 * LARGEST.config["hidden_size"] // LARGEST.config["num_attention_heads"],
    "vocab_size": 8 * LARGEST.config["vocab_size"],
}
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
)
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Decoder:
    """A Llama-style decoder as transformers builds it for llama, mistral and qwen2.

    Per layer: attention q/k/v/o (k and v over the key-value heads: grouped-query attention), the
    SwiGLU MLP gate/up/down, two RMSNorms; then a final RMSNorm, and lm_head unless it is tied to
    the embeddings. `qkv_bias`, `o_bias`, `mlp_bias`: which linears have a bias.
    """

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    tied: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False

    def layer_linears(self) -> list[tuple[str, int, int, bool]]:
        """(name, in_features, out_features, has a bias) of each linear in one layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [
            ("q_proj", self.hidden, q, self.qkv_bias),
            ("k_proj", self.hidden, kv, self.qkv_bias),
            ("v_proj", self.hidden, kv, self.qkv_bias),
            ("o_proj", q, self.hidden, self.o_bias),
            ("gate_proj", self.hidden, self.ffn, self.mlp_bias),
            ("up_proj", self.hidden, self.ffn, self.mlp_bias),
            ("down_proj", self.ffn, self.hidden, self.mlp_bias),
        ]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """The state dict's names and shapes (nn.Linear weights are (out, in)); no tied lm_head."""
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, self.hidden)}
        for index in range(self.layers):
            prefix = f"model.layers.{index}."
            for name, fan_in, fan_out, bias in self.layer_linears():
                module = prefix + ("self_attn." if name in ATTENTION else "mlp.") + name
                shapes[f"{module}.weight"] = (fan_out, fan_in)
                if bias:
                    shapes[f"{module}.bias"] = (fan_out,)
            shapes[prefix + "input_layernorm.weight"] = (self.hidden,)
            shapes[prefix + "post_attention_layernorm.weight"] = (self.hidden,)
        shapes["model.norm.weight"] = (self.hidden,)
        if not self.tied:
            shapes["lm_head.weight"] = (self.vocab, self.hidden)
        return shapes


def decoder_of(kind: str, hf_config) -> Decoder:
    """The layout of a checked transformers config; raises UnsupportedModel for one that can't be trained."""
    sizes = _sizes(kind, hf_config)
    return Decoder(
        vocab=sizes["vocab_size"],
        hidden=sizes["hidden_size"],
        layers=sizes["num_hidden_layers"],
        heads=sizes["num_attention_heads"],
        kv_heads=sizes["num_key_value_heads"],
        head_dim=sizes["head_dim"],
        ffn=sizes["intermediate_size"],
        tied=bool(getattr(hf_config, "tie_word_embeddings", False)),
        **_biases(kind, hf_config),
    )


def _sizes(kind: str, hf_config) -> dict[str, int]:
    """The config's sizes, refused (UnsupportedModel) where transformers couldn't build or train the model:
    what its classes would fail on, and what they would build but not run (heads not grouped evenly)."""

    def refuse(problem: Words) -> UnsupportedModel:
        return UnsupportedModel.of(
            "config.json is not a valid %(kind)s config: %(problem)s.", kind=kind, problem=problem
        )

    sizes = {field: getattr(hf_config, field, None) for field in SIZE_FIELDS}
    if _positive(sizes["hidden_size"]) and _positive(sizes["num_attention_heads"]):
        sizes["head_dim"] = _head_dim(kind, hf_config, sizes["hidden_size"] // sizes["num_attention_heads"])
    for field, value in sizes.items():
        if not _positive(value):
            raise refuse(
                Words.of("%(field)s must be a positive integer, not %(value)s", field=field, value=repr(value))
            )
    heads, kv_heads = sizes["num_attention_heads"], sizes["num_key_value_heads"]
    if heads % kv_heads:
        raise refuse(
            Words.of(
                "num_attention_heads (%(heads)s) must be a multiple of num_key_value_heads (%(kv_heads)s)",
                heads=heads,
                kv_heads=kv_heads,
            )
        )
    pad, vocab = getattr(hf_config, "pad_token_id", None), sizes["vocab_size"]
    if pad is not None and not (isinstance(pad, int) and -vocab <= pad < vocab):  # nn.Embedding's rule
        raise refuse(
            Words.of("pad_token_id %(pad)s is outside the vocabulary of %(vocab)s tokens", pad=repr(pad), vocab=vocab)
        )
    if hf_config.hidden_act not in ACTIVATIONS:
        raise refuse(
            Words.of(
                "hidden_act %(act)s is not one of %(known)s",
                act=repr(hf_config.hidden_act),
                known=", ".join(ACTIVATIONS),
            )
        )
    known = rope_types()
    for rope_type in _rope_types(hf_config):
        if rope_type not in known:
            raise refuse(
                Words.of(
                    "rope_type %(rope_type)s is not one of %(known)s", rope_type=repr(rope_type), known=", ".join(known)
                )
            )
    return sizes


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def rope_types() -> tuple[str, ...]:
    """The rotary embeddings transformers can build: its default and those it has an init function for."""
    import_transformers()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # imports torch only where installed

    return ("default", *ROPE_INIT_FUNCTIONS)


def _head_dim(kind: str, hf_config, default: int):
    """As each family's attention reads it: Mistral falls back on a null head_dim, Llama and Qwen2 don't."""
    if kind == "mistral":
        return getattr(hf_config, "head_dim", None) or default
    return getattr(hf_config, "head_dim", default)


def _biases(kind: str, hf_config) -> dict[str, bool]:
    if kind == "qwen2":  # Qwen2 always has q/k/v biases, never o_proj or MLP biases
        return {"qkv_bias": True}
    if kind == "llama":
        attention = bool(getattr(hf_config, "attention_bias", False))
        return {"qkv_bias": attention, "o_bias": attention, "mlp_bias": bool(getattr(hf_config, "mlp_bias", False))}
    return {}


def _rope_types(hf_config) -> list[str]:
    """The rotary embedding types a config names (one, or one per attention layer type)."""
    rope = getattr(hf_config, "rope_parameters", None) or {}
    if not isinstance(rope, Mapping):
        return []
    if "rope_type" in rope or not all(isinstance(value, Mapping) for value in rope.values()):
        return [rope.get("rope_type", "default")]
    return [value.get("rope_type", "default") for value in rope.values()]
