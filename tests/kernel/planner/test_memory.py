"""Memory: the documented per-rank formula, the lowest ZeRO stage that fits, micro-batch caps."""

from __future__ import annotations

import pytest

from kernel.modelspecs import resolve_model
from kernel.planner import activation_bytes_per_sample, micro_batch_cap, model_state_bytes, plan, rank_bytes
from kernel.planner.memory import GIB, RESERVED_BYTES, gather_buffer_bytes
from tests.support.planner.fleets import chips, nodes, request

N = 1_000_000


@pytest.mark.parametrize(
    ("stage", "bytes_per_rank"),
    [(0, 16 * N), (1, 4 * N + 12 * N / 8), (2, 2 * N + 14 * N / 8), (3, 16 * N / 8)],
)
def test_model_state_is_sharded_stage_by_stage(stage, bytes_per_rank):
    assert model_state_bytes(N, stage, ranks=8) == pytest.approx(bytes_per_rank)


def test_activations_follow_the_documented_formula():
    m = resolve_model("llama-2-7b")
    s, h = m.seq_len, m.hidden_size
    expected = 2 * s * h * m.num_layers + s * (16 * h + 8 * m.ffn_size) + 6 * s * m.vocab_size
    assert activation_bytes_per_sample(m) == expected


def test_a_rank_needs_state_buffers_activations_and_the_reserve():
    m = resolve_model("llama-2-7b")
    need = rank_bytes(m, 3, 16, 2)
    assert (
        need == 16 * m.parameters / 16 + gather_buffer_bytes(m, 3) + 2 * activation_bytes_per_sample(m) + RESERVED_BYTES
    )


def test_llama_tiny_needs_no_sharding():
    quote = plan(request("llama-tiny", policy="fastest"), chips(), nodes("rtx-4090", 2))
    assert quote.zero_stage == 0


def lowest_stage_by_formula(model, memory_gib, ranks, micro_batch):
    return next(s for s in range(4) if rank_bytes(model, s, ranks, micro_batch) <= memory_gib * GIB)


@pytest.mark.parametrize("count", [8, 16, 32])
def test_llama_2_7b_on_4090s_gets_the_lowest_stage_the_formula_allows(count):
    model = resolve_model("llama-2-7b")
    quote = plan(request(per_device_batch_size=1, chip_counts={"rtx-4090": count}), chips(), nodes("rtx-4090", 4))
    assert quote.zero_stage == lowest_stage_by_formula(model, 24, count, 1)
    assert quote.zero_stage >= 2  # 7B's 16 bytes per parameter can't sit unsharded on 24 GiB


def test_every_rank_fits_its_chip_and_its_micro_batch_cap():
    quote = plan(request("llama-2-13b", policy="fastest"), chips(), nodes("rtx-4090", 4) + nodes("a100-80g", 1))
    memory = {c.slug: c.memory_gib for c in chips()}
    model = resolve_model("llama-2-13b")
    for rank in quote.ranks:
        assert rank.memory_gib <= memory[rank.chip]
        assert rank.micro_batch <= micro_batch_cap(model, memory[rank.chip], quote.zero_stage, quote.world_size)
