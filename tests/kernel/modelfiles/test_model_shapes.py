"""The web tier sizes models without torch: kernel.modelfiles.hfconfig works the shapes out of the config, and they
are exactly those of the model transformers builds on torch's meta device (tests/support/probes/meta_oracle.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.modelfiles.hfconfig import UnsupportedModel, model_shape, parameter_shapes
from kernel.modelspecs import CATALOG, resolve_model
from tests.support.hfmodels import tiny_config
from tests.support.probes.meta_oracle import meta_shapes


def worked_out(config: dict):
    return parameter_shapes(config), model_shape(config)


def assert_same_as_meta(config: dict) -> None:
    shapes, shape = worked_out(config)
    oracle_shapes, oracle = meta_shapes(config)
    assert shapes == oracle_shapes
    assert shape == oracle
    for rank, targets in ((8, ("q_proj", "v_proj")), (4, ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj"))):
        assert shape.lora_parameters(rank, targets) == oracle.lora_parameters(rank, targets)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_catalog_config_including_llama_2_70b_is_worked_out_as_the_meta_model(name):
    assert_same_as_meta(CATALOG[name].config)
    assert model_shape(CATALOG[name].config).parameters == resolve_model(name).parameters


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_each_family_tied_or_not_with_grouped_query_attention(family, tied, kv_heads):
    assert_same_as_meta(tiny_config(family, tie_word_embeddings=tied, num_key_value_heads=kv_heads))


@pytest.mark.parametrize(
    "config",
    [
        tiny_config("llama", attention_bias=True),
        tiny_config("llama", mlp_bias=True, attention_bias=True),
        tiny_config("llama", head_dim=32),
        tiny_config("mistral", head_dim=24),
        tiny_config("mistral", head_dim=None),
        tiny_config("qwen2", head_dim=32),
        tiny_config("qwen2", num_key_value_heads=None),
        tiny_config("llama", num_key_value_heads=None),
        tiny_config("llama", rope_scaling={"rope_type": "linear", "factor": 2.0}),
        tiny_config("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=1),
        tiny_config("llama", hidden_act="gelu", pad_token_id=None),
        {**tiny_config("mistral"), "transformers_version": "5.0.0", "torch_dtype": "bfloat16"},
    ],
    ids=lambda config: (
        "-".join(f"{k}={v}" for k, v in config.items() if k not in tiny_config(config["model_type"]))
        or config["model_type"]
    ),
)
def test_biases_head_dims_defaults_and_settings_that_change_no_shape(config):
    assert_same_as_meta(config)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(["llama", "mistral", "qwen2"]),
    heads=st.sampled_from([1, 2, 4, 8]),
    groups=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([4, 8, 16]),
    layers=st.integers(1, 3),
    ffn=st.integers(1, 96),
    vocab=st.integers(16, 400),
    tied=st.booleans(),
)
def test_random_configs_are_worked_out_as_the_meta_model(family, heads, groups, head_dim, layers, ffn, vocab, tied):
    kv_heads = max(heads // groups, 1)
    config = tiny_config(
        family,
        vocab_size=vocab,
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=ffn,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    assert_same_as_meta(config)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive integer, not 0"),
        ({"num_attention_heads": 0}, "not a valid llama config"),
        ({"vocab_size": -5}, "vocab_size must be a positive integer, not -5"),
        ({"pad_token_id": 500}, "pad_token_id 500 is outside the vocabulary of 300 tokens"),
        ({"hidden_act": "nope"}, "hidden_act 'nope' is not one of"),
        ({"rope_scaling": {"rope_type": "bogus", "factor": 2.0}}, "rope_type 'bogus' is not one of default, linear"),
        ({"hidden_size": "64"}, "not a valid llama config"),
    ],
)
def test_a_config_the_meta_model_cannot_be_built_from_is_refused_by_name(changes, says):
    config = tiny_config("llama", **changes)
    with pytest.raises(Exception):  # noqa: B017 - whatever transformers or torch raise
        meta_shapes(config)
    with pytest.raises(UnsupportedModel, match=says):
        model_shape(config)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"num_key_value_heads": 3}, r"num_attention_heads \(4\) must be a multiple of num_key_value_heads \(3\)"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer, not 0"),
        ({"hidden_act": "prelu"}, "hidden_act 'prelu' is not one of"),
    ],
)
def test_configs_the_meta_model_builds_but_training_cannot_use_are_refused_too(changes, says):
    with pytest.raises(UnsupportedModel, match=says):
        model_shape(tiny_config("llama", **changes))
