"""Model shapes for planning, and the built-in catalog of Hugging Face configs trained from scratch.

Imports neither Django nor torch: the planner sizes jobs from these numbers. The runtime builds
the network from the Hugging Face config itself (kernel.modelfiles.hfconfig, transformers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

FULL, LORA = "full", "lora"
MODES = (FULL, LORA)


class UnknownModel(ValueError):
    """A model name that is not a built-in config."""


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a Llama-style decoder."""

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_size: int
    seq_len: int
    description: str = ""
    architecture: str = "llama"
    mode: str = FULL
    exact_parameters: int = 0  # worked out from the config (kernel.modelfiles.hfconfig); 0: use the Llama formula
    trainable_parameters: int | None = None  # LoRA: the adapter's; None: every parameter

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def parameters(self) -> int:
        """Every parameter of the network, trained or frozen."""
        return self.exact_parameters or self.llama_parameters

    @property
    def trainable(self) -> int:
        """Parameters with gradients and optimizer state: all of them, or a LoRA adapter's."""
        return self.parameters if self.trainable_parameters is None else self.trainable_parameters

    @property
    def llama_parameters(self) -> int:
        """Parameter count of an untied, bias-free Llama decoder of this shape (RMSNorm, SwiGLU)."""
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attention = h * h * 2 + h * kv * 2
        mlp = 3 * h * self.ffn_size
        per_layer = attention + mlp + 2 * h
        return 2 * self.vocab_size * h + self.num_layers * per_layer + h

    @property
    def training_flops_per_token(self) -> int:
        """Weights: 2N forward, 2N backward through the activations, 2T for the trained weights' gradients
        (6N when everything trains); plus 12·L·H·S for the attention scores."""
        weights = 4 * self.parameters + 2 * self.trainable
        return weights + 12 * self.num_layers * self.hidden_size * self.seq_len

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "ffn_size": self.ffn_size,
            "seq_len": self.seq_len,
            "architecture": self.architecture,
            "mode": self.mode,
            "exact_parameters": self.exact_parameters,
            "trainable_parameters": self.trainable_parameters,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> ModelSpec:
        """The inverse of as_dict (keys it doesn't know, such as a launch's extras, are left out)."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def _llama(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, context: int) -> dict:
    """A Hugging Face LlamaConfig mapping (untied embeddings, no biases)."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": ffn,
        "max_position_embeddings": context,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }


@dataclass(frozen=True)
class CatalogModel:
    """A built-in model: a Hugging Face config trained from scratch (random initial weights, no tokenizer:
    text is fed to it byte by byte)."""

    name: str
    config: dict
    seq_len: int
    description: str


CATALOG: dict[str, CatalogModel] = {
    model.name: model
    for model in [
        CatalogModel(
            "llama-tiny",
            _llama(512, 64, 2, 4, 4, 172, 2048),
            64,
            "A 0.2M-parameter Llama config, trained from scratch; runs on a CPU in seconds",
        ),
        CatalogModel(
            "llama-2-7b",
            _llama(32000, 4096, 32, 32, 32, 11008, 4096),
            4096,
            "The Llama 2 7B architecture, trained from scratch (no pretrained weights)",
        ),
        CatalogModel(
            "llama-2-13b",
            _llama(32000, 5120, 40, 40, 40, 13824, 4096),
            4096,
            "The Llama 2 13B architecture, trained from scratch (no pretrained weights)",
        ),
        CatalogModel(
            "llama-2-70b",
            _llama(32000, 8192, 80, 64, 8, 28672, 4096),
            4096,
            "The Llama 2 70B architecture (grouped-query), trained from scratch (no pretrained weights)",
        ),
    ]
}


def spec_from_config(
    name: str,
    config: dict,
    seq_len: int,
    *,
    parameters: int = 0,
    trainable: int | None = None,
    mode: str = FULL,
    description: str = "",
) -> ModelSpec:
    """The planner's view of a Hugging Face config; `parameters`/`trainable` are exact counts when known."""
    heads = int(config["num_attention_heads"])
    return ModelSpec(
        name=name,
        vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        ffn_size=int(config["intermediate_size"]),
        seq_len=seq_len,
        description=description,
        architecture=str(config.get("model_type", "llama")),
        mode=mode,
        exact_parameters=parameters,
        trainable_parameters=trainable,
    )


def resolve_model(name: str) -> ModelSpec:
    """The spec of a catalog model trained fully; raises UnknownModel naming the choices.

    Its parameter count is the Llama formula, which equals the exact count for these untied,
    bias-free configs (tests check it against the model built on torch's meta device); the
    platform's planning passes exact counts.
    """
    model = CATALOG.get(name.strip())
    if model is None:
        raise UnknownModel(f"Unknown model '{name}'. Choose one of: {', '.join(CATALOG)}.")
    return spec_from_config(model.name, model.config, model.seq_len, description=model.description)
