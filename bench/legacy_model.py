"""A Llama-style decoder built from a `ModelSpec`.

RMSNorm, rotary position embeddings, grouped-query attention, a SwiGLU MLP and an untied lm
head, with no biases anywhere: exactly the network whose size `ModelSpec.parameters` counts, so
the planner's memory and FLOP estimates describe what actually trains.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from kernel.modelspecs import ModelSpec


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain (one vector of `hidden` parameters)."""

    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 so bf16 training on GPUs keeps a stable scale.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (seq_len, head_dim) for the rotate-half RoPE convention."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) queries or keys by their positions."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention where groups of query heads share one key/value head (GQA)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        kv_width = spec.num_kv_heads * spec.head_dim
        self.q_proj = nn.Linear(spec.hidden_size, spec.hidden_size, bias=False)
        self.k_proj = nn.Linear(spec.hidden_size, kv_width, bias=False)
        self.v_proj = nn.Linear(spec.hidden_size, kv_width, bias=False)
        self.o_proj = nn.Linear(spec.hidden_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, hidden))


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(spec.hidden_size, spec.ffn_size, bias=False)
        self.up_proj = nn.Linear(spec.hidden_size, spec.ffn_size, bias=False)
        self.down_proj = nn.Linear(spec.ffn_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.input_norm = RMSNorm(spec.hidden_size)
        self.attn = Attention(spec)
        self.post_attn_norm = RMSNorm(spec.hidden_size)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        return x + self.mlp(self.post_attn_norm(x))


class LlamaModel(nn.Module):
    """Token embedding, `num_layers` blocks, final norm and an untied lm head."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
            raise ValueError(f"{spec.name}: heads must divide hidden size and kv heads must divide heads")
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        cos, sin = rotary_tables(spec.head_dim, spec.seq_len)
        # Non-persistent: derived from the spec, so neither counted nor checkpointed.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(_init_weights)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, seq, vocab) for input ids of shape (batch, seq)."""
        seq = tokens.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        x = self.embed_tokens(tokens)
        for block in self.layers:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def _init_weights(module: nn.Module) -> None:
    """Small normal init (std 0.02) as in Llama; norms keep their ones."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def token_loss_sum(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Sum of next-token cross-entropy over a (batch, seq_len + 1) block of ids.

    A sum, not a mean, so ranks with different micro-batches can be combined exactly.
    """
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="sum")


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def spec_from_dict(model: dict) -> ModelSpec:
    """The ModelSpec a launch file carries (`ModelSpec.as_dict()`); unknown keys are ignored."""
    names = {f.name for f in dataclasses.fields(ModelSpec)}
    missing = sorted(names - {"description"} - set(model))
    if missing:
        raise ValueError(f"model spec is missing {', '.join(missing)}")
    return ModelSpec(**{key: value for key, value in model.items() if key in names})
