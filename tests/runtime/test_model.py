"""The network the runtime trains is the one the planner sizes."""

from __future__ import annotations

import pytest
import torch

from workers.modelspecs import MODELS, ModelSpec, resolve_model
from workers.runtime.model import LlamaModel, count_parameters, spec_from_dict, token_loss_sum

# The 70B shape (8 query heads per key/value head, ffn = 3.5 × hidden) scaled down to run.
MINI_70B = ModelSpec(
    "mini-70b-shape",
    vocab_size=320,
    hidden_size=128,
    num_layers=3,
    num_heads=16,
    num_kv_heads=2,
    ffn_size=448,
    seq_len=32,
)


def test_llama_tiny_has_exactly_the_parameters_its_spec_counts():
    spec = resolve_model("llama-tiny")
    assert count_parameters(LlamaModel(spec)) == spec.parameters


def test_a_scaled_down_grouped_query_model_has_exactly_the_parameters_its_spec_counts():
    model = LlamaModel(MINI_70B)
    assert count_parameters(model) == MINI_70B.parameters
    kv_width = MINI_70B.num_kv_heads * MINI_70B.head_dim
    assert model.layers[0].attn.k_proj.weight.shape == (kv_width, MINI_70B.hidden_size)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_built_in_model_has_exactly_the_parameters_its_spec_counts(name):
    spec = MODELS[name]
    with torch.device("meta"):  # shapes only: a 70B model without 280 GB of memory
        model = LlamaModel(spec)
    assert count_parameters(model) == spec.parameters


def test_a_grouped_query_model_is_causal():
    torch.manual_seed(0)
    model = LlamaModel(MINI_70B).eval()
    tokens = torch.randint(MINI_70B.vocab_size, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % MINI_70B.vocab_size
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert before.shape == (2, 16, MINI_70B.vocab_size)
    torch.testing.assert_close(before[:, :10], after[:, :10])
    assert not torch.allclose(before[:, 10:], after[:, 10:])


def test_the_loss_of_an_untrained_model_is_about_log_vocab():
    spec = resolve_model("llama-tiny")
    torch.manual_seed(0)
    batch = torch.randint(spec.vocab_size, (4, spec.seq_len + 1))
    loss = token_loss_sum(LlamaModel(spec), batch) / (4 * spec.seq_len)
    assert abs(loss.item() - torch.log(torch.tensor(float(spec.vocab_size))).item()) < 0.1


def test_a_launch_files_model_dict_round_trips_to_its_spec():
    spec = resolve_model("llama-2-70b")
    assert spec_from_dict(spec.as_dict()) == ModelSpec(**spec.as_dict())
    with pytest.raises(ValueError, match="missing"):
        spec_from_dict({"name": "x"})
