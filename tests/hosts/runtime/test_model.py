"""The network the runtime trains is the one the planner sizes: exact counts from the config itself."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hosts.runtime.hfmodel import ModelSource, build_model, spec_from_dict, token_loss_sum
from kernel.modelfiles.hfconfig import UnsupportedModel, model_shape, model_type, parameter_shapes
from kernel.modelspecs import CATALOG, ModelSpec, resolve_model, spec_from_config
from tests.support.hfmodels import tiny_config


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_catalog_model_counts_exactly_what_its_config_builds(name):
    """The Llama formula the planner uses offline equals the meta-device count of the real class."""
    assert resolve_model(name).parameters == model_shape(CATALOG[name].config).parameters


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_the_shape_of_a_config_is_that_of_the_model_transformers_builds(family):
    config = tiny_config(family)
    model = build_model(ModelSource("t", config, seq_len=32), seed=0)
    assert model_shape(config).parameters == sum(p.numel() for p in model.parameters())
    assert parameter_shapes(config) == {name: tuple(t.shape) for name, t in model.state_dict().items()}


def test_qwen2_biases_are_counted_where_a_llama_formula_would_miss_them():
    config = tiny_config("qwen2")
    spec = spec_from_config("q", config, 32, parameters=model_shape(config).parameters)
    assert spec.parameters > spec.llama_parameters


def test_a_lora_adapter_counts_what_peft_makes_trainable():
    config = tiny_config("llama")
    source = ModelSource.from_launch(
        {"name": "t", "config": config, "seq_len": 32, "mode": "lora", "lora": {"r": 4, "target_modules": ["q_proj"]}}
    )
    model = build_model(source, seed=0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert model_shape(config).lora_parameters(4, ["q_proj"]) == trainable
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_lora_needs_fewer_training_flops_than_full_training():
    config = tiny_config("llama")
    shape = model_shape(config)
    full = spec_from_config("t", config, 32, parameters=shape.parameters)
    lora = spec_from_config(
        "t", config, 32, parameters=shape.parameters, trainable=shape.lora_parameters(8, ["q_proj"]), mode="lora"
    )
    assert lora.training_flops_per_token < full.training_flops_per_token


def test_an_unsupported_architecture_is_named():
    with pytest.raises(UnsupportedModel, match="'gpt2'.*Supported: llama"):
        model_type({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})


def test_the_loss_of_an_untrained_model_is_about_log_vocab():
    spec = resolve_model("llama-tiny")
    model = build_model(ModelSource.from_launch(spec.as_dict()), seed=0)
    ids = torch.randint(spec.vocab_size, (4, spec.seq_len + 1))
    mask = torch.ones_like(ids, dtype=torch.bool)
    loss_sum, tokens = token_loss_sum(model, ids, mask)
    assert tokens == 4 * spec.seq_len
    assert loss_sum.item() / tokens == pytest.approx(torch.log(torch.tensor(spec.vocab_size)).item(), abs=0.3)


def test_masked_out_targets_add_nothing_to_the_loss():
    spec = resolve_model("llama-tiny")
    model = build_model(ModelSource.from_launch(spec.as_dict()), seed=0)
    ids = torch.randint(spec.vocab_size, (2, spec.seq_len + 1))
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % spec.vocab_size  # the last id is a target only, never an input
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, -1] = False
    with torch.no_grad():
        (before, tokens), (after, _) = token_loss_sum(model, ids, mask), token_loss_sum(model, changed, mask)
        kept, _ = token_loss_sum(model, changed, torch.ones_like(mask))
    assert tokens == 2 * (spec.seq_len - 1)
    assert after.item() == pytest.approx(before.item(), rel=1e-6)
    assert kept.item() != pytest.approx(after.item(), rel=1e-3)


def test_a_launch_files_spec_round_trips_and_names_what_is_missing():
    spec = resolve_model("llama-tiny")
    assert spec_from_dict({**spec.as_dict(), "config": {}, "path": None}) == replace(spec, description="")
    assert spec_from_dict(spec.as_dict()) == ModelSpec(**spec.as_dict())
    with pytest.raises(ValueError, match="missing"):
        spec_from_dict({"name": "x"})
