"""Built-in model architectures (Llama-style decoders), shared by the planner and the runtime.

Imports neither Django nor torch: the planner sizes jobs from these numbers and the training
runtime builds the network from them.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownModel(ValueError):
    """A model name that is neither a built-in config nor one of its aliases."""


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

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def parameters(self) -> int:
        """Exact parameter count of the runtime's network (untied embeddings, RMSNorm, SwiGLU)."""
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attention = h * h * 2 + h * kv * 2
        mlp = 3 * h * self.ffn_size
        per_layer = attention + mlp + 2 * h
        return 2 * self.vocab_size * h + self.num_layers * per_layer + h

    @property
    def training_flops_per_token(self) -> int:
        """6·N for the weights (forward and backward) plus 12·L·H·S for attention scores."""
        return 6 * self.parameters + 12 * self.num_layers * self.hidden_size * self.seq_len

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
        }


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "llama-tiny",
            512,
            64,
            2,
            4,
            4,
            172,
            64,
            "A 0.2M-parameter decoder that trains on a CPU in seconds",
        ),
        ModelSpec("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096, "Llama 2 7B architecture"),
        ModelSpec("llama-2-13b", 32000, 5120, 40, 40, 40, 13824, 4096, "Llama 2 13B architecture"),
        ModelSpec("llama-2-70b", 32000, 8192, 80, 64, 8, 28672, 4096, "Llama 2 70B architecture (grouped-query)"),
    ]
}

ALIASES = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
}


def resolve_model(name: str) -> ModelSpec:
    """The built-in spec for a name or alias; raises UnknownModel naming the choices."""
    key = ALIASES.get(name.strip(), name.strip())
    if key not in MODELS:
        choices = ", ".join([*MODELS, *ALIASES])
        raise UnknownModel(f"Unknown model '{name}'. Choose one of: {choices}.")
    return MODELS[key]
