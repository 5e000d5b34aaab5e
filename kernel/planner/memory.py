"""How many bytes one data-parallel rank needs, and the largest micro-batch its chip can hold.

Per rank, with N parameters, n data-parallel ranks, ZeRO stage z and micro-batch m:

    bytes = model_state(z, n) + gather_buffer(z) + m * activations_per_sample + RESERVED

model_state: bf16 weights 2N, bf16 gradients 2T, Adam 12T (fp32 master weights, m and v) for the
T parameters that train (T = N in full training, the adapter's size under LoRA, whose frozen base
has neither gradients nor optimizer state); ZeRO-1 shards the 12T across the n ranks, ZeRO-2 also
the gradients, ZeRO-3 also the weights. In full training:

    z=0: 16N      z=1: 4N + 12N/n      z=2: 2N + 14N/n      z=3: 16N/n

gather_buffer (ZeRO-3 only): the full bf16 weights of two gathered units (the one computing and
the one prefetched), a unit being a decoder layer or the embedding/LM-head matrix (V x H).

activations_per_sample, with activation checkpointing at every decoder layer (S = sequence,
H = hidden, F = FFN width, L = layers, V = vocabulary):

    2*S*H*L            the bf16 input kept at each layer boundary
  + S*(16*H + 8*F)     one layer's full activations while it is recomputed in backward:
                       norms, Q/K/V, attention output, residuals (~16*S*H bytes; memory-
                       efficient attention, so no S^2 score matrix), SwiGLU gate, up,
                       activation and product (~8*S*F bytes)
  + 6*S*V              bf16 logits plus their fp32 copy for the loss

RESERVED = 1 GiB per chip: runtime context, collective buffers, allocator fragmentation.
DeepSpeed shards evenly, so every rank of a job holds the same model state whatever its chip.
"""

from __future__ import annotations

import functools

from kernel.modelspecs import ModelSpec

GIB = 1024**3
RESERVED_BYTES = GIB
WEIGHT_BYTES, GRAD_BYTES, ADAM_BYTES = 2, 2, 12
ZERO_STAGES = (0, 1, 2, 3)


def model_state_bytes(params: int, stage: int, ranks: int, trainable: int | None = None) -> float:
    """Weights, gradients and Adam states held by one rank at this ZeRO stage."""
    trainable = params if trainable is None else trainable
    weights = WEIGHT_BYTES * params / (ranks if stage >= 3 else 1)
    grads = GRAD_BYTES * trainable / (ranks if stage >= 2 else 1)
    adam = ADAM_BYTES * trainable / (ranks if stage >= 1 else 1)
    return weights + grads + adam


@functools.cache
def _parameters(model: ModelSpec) -> tuple[int, int]:
    """(all, trainable): computed properties the search asks for thousands of times."""
    return model.parameters, model.trainable


@functools.cache
def gather_buffer_bytes(model: ModelSpec, stage: int) -> int:
    """ZeRO-3 materialises whole units of weights while they compute; other stages hold them anyway."""
    if stage < 3:
        return 0
    per_layer = (_parameters(model)[0] - 2 * model.vocab_size * model.hidden_size) // max(model.num_layers, 1)
    largest_unit = max(per_layer, model.vocab_size * model.hidden_size)
    return 2 * WEIGHT_BYTES * largest_unit


@functools.cache
def activation_bytes_per_sample(model: ModelSpec) -> int:
    """Activations of one sequence with per-layer checkpointing (formula in the module docstring)."""
    s, h, f = model.seq_len, model.hidden_size, model.ffn_size
    checkpoints = 2 * s * h * model.num_layers
    recomputed_layer = s * (16 * h + 8 * f)
    logits = 6 * s * model.vocab_size
    return checkpoints + recomputed_layer + logits


def fixed_bytes(model: ModelSpec, stage: int, ranks: int) -> float:
    """Everything on a rank except its micro-batch's activations."""
    params, trainable = _parameters(model)
    return model_state_bytes(params, stage, ranks, trainable) + gather_buffer_bytes(model, stage) + RESERVED_BYTES


def rank_bytes(model: ModelSpec, stage: int, ranks: int, micro_batch: int) -> float:
    """Total bytes one rank needs (what the plan reports per rank)."""
    return fixed_bytes(model, stage, ranks) + micro_batch * activation_bytes_per_sample(model)


def micro_batch_cap(model: ModelSpec, memory_gib: float, stage: int, ranks: int) -> int:
    """The largest micro-batch a chip of this size holds at this stage and world size (0: none)."""
    free = memory_gib * GIB - fixed_bytes(model, stage, ranks)
    return max(int(free // activation_bytes_per_sample(model)), 0)


def lowest_fitting_stage(model: ModelSpec, memories_gib: list[float], micro_batches: list[int]) -> int | None:
    """The lowest ZeRO stage at which every rank (memory, micro-batch) fits; None if none does."""
    ranks = len(memories_gib)
    for stage in ZERO_STAGES:
        needs = [rank_bytes(model, stage, ranks, m) for m in micro_batches]
        if all(need <= mem * GIB for need, mem in zip(needs, memories_gib, strict=True)):
            return stage
    return None


def fits_chip(model: ModelSpec, memory_gib: float, ranks: int) -> bool:
    """Whether one sample fits a chip of this size at some ZeRO stage, in a world of `ranks` ranks."""
    return any(micro_batch_cap(model, memory_gib, stage, ranks) >= 1 for stage in ZERO_STAGES)
