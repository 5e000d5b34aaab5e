"""Checks of an unpacked model folder before anything is stored (kernel.modelfiles.checks): config.json, the weights'
safetensors headers against it, the tokenizer, and the files a checked folder may keep."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

from kernel.modelfiles import hfconfig
from kernel.modelfiles import weights as modelweights
from kernel.modelfiles.checks import check_model_dir
from kernel.modelfiles.loaders import refuse_unneeded_files
from tests.support.hfmodels import make_model_dir
from tests.support.model_archives import copy_model, refusal

# -- a good model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_saved_model_folder_is_described_exactly(model_dirs, real_parameters, family):
    folder = model_dirs[family]

    files = check_model_dir(folder)

    config = json.loads((folder / "config.json").read_text())
    assert files.architecture == family
    assert files.parameters == real_parameters[family]
    assert files.shape == hfconfig.model_shape(config).as_dict()
    assert files.config == config
    assert files.has_chat_template
    assert files.max_position_embeddings == 256
    assert files.size_bytes == sum(p.stat().st_size for p in folder.iterdir())


# -- config.json -----------------------------------------------------------------------------------


def test_a_folder_without_config_json_is_refused(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m", drop=("config.json",))

    error = refusal(check_model_dir, folder)

    assert "No config.json" in str(error) and error.code == "missing_config"


def test_an_unsupported_architecture_is_refused_naming_the_supported_ones(model_dirs, tmp_path):
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}
    folder = copy_model(model_dirs["llama"], tmp_path / "m", config=gpt2)

    error = refusal(check_model_dir, folder)

    assert "Unsupported model architecture 'gpt2'" in str(error) and "llama (LlamaForCausalLM)" in str(error)
    assert error.code == "unsupported_model"


@pytest.mark.parametrize(
    ("field", "value"), [("num_hidden_layers", 100_000), ("vocab_size", 10**7), ("hidden_size", 10**6)]
)
def test_a_config_past_the_largest_sizes_is_refused_before_anything_is_built_from_it(
    model_dirs, tmp_path, monkeypatch, field, value
):
    """A 6 KB upload whose num_hidden_layers was huge (and intermediate_size left out) grew a worker by 848 MiB."""
    folder = copy_model(model_dirs["llama"], tmp_path / "m", config={field: value})
    config = json.loads((folder / "config.json").read_text())
    del config["intermediate_size"]
    (folder / "config.json").write_text(json.dumps(config))

    def never(*args):
        raise AssertionError("transformers was asked to build the config")

    monkeypatch.setattr(hfconfig, "import_transformers", never)
    error = refusal(check_model_dir, folder)

    assert f"config.json's {field} is {value:,}; models trained here have at most" in str(error)
    assert error.code == "unsupported_model"


# -- weights ---------------------------------------------------------------------------------------


def test_weights_of_other_shapes_are_refused_naming_the_tensor_and_both_shapes(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m", config={"intermediate_size": 96})

    error = refusal(check_model_dir, folder)

    assert "model.layers.0.mlp.gate_proj.weight has shape [128, 64]; config.json implies [96, 64]" in str(error)
    assert "and 1 more" in str(error)  # 6 mismatched tensors, the first 5 named
    assert error.code == "weights_mismatch"


def test_missing_and_unexpected_tensors_are_named(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.final_norm.weight"] = tensors.pop("model.norm.weight")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    error = str(refusal(check_model_dir, folder))

    assert "model.norm.weight is missing (config.json implies [64])" in error
    assert "model.final_norm.weight is not a weight of this config's model" in error


def test_a_tied_output_layer_may_be_left_out_of_the_weights(tmp_path):
    from transformers import AutoModelForCausalLM

    folder = make_model_dir(tmp_path / "tied", "qwen2", tie_word_embeddings=True)
    real = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(str(folder)).parameters())

    assert "lm_head.weight" not in load_file(folder / "model.safetensors")
    assert check_model_dir(folder).parameters == real


def test_sharded_weights_are_checked_across_their_shards(model_dirs, tmp_path):
    from transformers import AutoModelForCausalLM

    folder = copy_model(model_dirs["llama"], tmp_path / "m", drop=("model.safetensors",))
    AutoModelForCausalLM.from_pretrained(str(model_dirs["llama"])).save_pretrained(str(folder), max_shard_size="100KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and (folder / "model.safetensors.index.json").is_file()

    assert check_model_dir(folder).architecture == "llama"

    shards[0].unlink()
    assert "names shard(s) the upload lacks" in str(refusal(check_model_dir, folder))


def test_a_truncated_weights_file_is_refused(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])

    error = refusal(check_model_dir, folder)

    assert "model.safetensors is not a valid safetensors file" in str(error) and "truncated" in str(error)


def test_quantized_weights_are_refused(model_dirs, tmp_path):
    import torch

    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.int8)
    save_file(tensors, folder / "model.safetensors")

    assert "model.norm.weight is stored as I8" in str(refusal(check_model_dir, folder))


def test_a_config_far_bigger_than_its_weights_is_refused_before_the_model_is_built(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m", config={"num_hidden_layers": 300})

    error = refusal(check_model_dir, folder)

    assert "they don't belong together" in str(error) and error.code == "weights_mismatch"


def rewrite_weights(folder, edit) -> None:
    """Rewrite model.safetensors from edit(header, data) -> (header, data): a crafted but well-formed file."""
    path = folder / "model.safetensors"
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header, data = edit(json.loads(raw[8 : 8 + length]), raw[8 + length :])
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def in_order(header: dict) -> list[str]:
    return sorted((name for name in header if name != "__metadata__"), key=lambda name: header[name]["data_offsets"])


def gap_after_first(header, data):
    first = in_order(header)[0]
    cut = header[first]["data_offsets"][1]
    for name in in_order(header)[1:]:
        header[name]["data_offsets"] = [offset + 8 for offset in header[name]["data_offsets"]]
    return header, data[:cut] + bytes(8) + data[cut:]


def two_norms_on_one_range(header, data):
    earlier, later = [name for name in in_order(header) if name.endswith("layernorm.weight")][:2]
    header[later]["data_offsets"] = header[earlier]["data_offsets"]
    return header, data


def padding_at_the_end(header, data):
    return header, data + bytes(2 * 1024 * 1024)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (gap_after_first, "(8 unused bytes after)"),
        (two_norms_on_one_range, "(overlapping the tensor before it)"),
        (padding_at_the_end, "2,097,152 bytes follow its last tensor, which no loader reads"),
    ],
    ids=["a gap", "an overlap", "padding after the last tensor"],
)
def test_safetensors_byte_ranges_must_follow_one_another_from_first_byte_to_last(model_dirs, tmp_path, edit, says):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    rewrite_weights(folder, edit)

    error = refusal(check_model_dir, folder)

    assert "model.safetensors is not a valid safetensors file" in str(error) and says in str(error)


def test_a_safetensors_header_past_its_bound_is_refused_before_it_is_parsed(model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(modelweights, "MAX_HEADER_BYTES", 1000)
    folder = copy_model(model_dirs["llama"], tmp_path / "m")

    error = refusal(check_model_dir, folder)

    assert "its header is" in str(error) and "at most 1,000 are read" in str(error)


# -- tokenizer -------------------------------------------------------------------------------------


def test_a_folder_without_a_tokenizer_is_refused(model_dirs, tmp_path):
    drop = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    folder = copy_model(model_dirs["llama"], tmp_path / "m", drop=drop)

    error = refusal(check_model_dir, folder)

    assert "No tokenizer" in str(error) and "tokenizer.save_pretrained" in str(error)
    assert error.code == "missing_tokenizer"


def test_a_tokenizer_that_does_not_load_is_refused(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    (folder / "tokenizer.json").write_text('{"model": "not a tokenizer"')

    error = refusal(check_model_dir, folder)

    assert "The tokenizer can't be loaded" in str(error) and error.code == "invalid_tokenizer"


def test_a_tokenizer_larger_than_the_embeddings_is_refused(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    tokens = config["vocab_size"]
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["added_tokens"].append(
        {"id": tokens, "content": "<|extra|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
    )  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))

    error = refusal(check_model_dir, folder)

    assert f"vocab_size is {tokens:,}" in str(error) and "resize_token_embeddings" in str(error)


# -- what a checked folder may hold ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("padding.safetensors", "'padding.safetensors' holds weights that config.json and the index don't use"),
        ("nested/config.json", "'nested/config.json' is in a subfolder; a model folder keeps its files at its top"),
    ],
)
def test_files_the_checks_did_not_read_are_refused_once_the_folder_is_checked(model_dirs, tmp_path, name, says):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_bytes((folder / "model.safetensors").read_bytes())

    error = refusal(refuse_unneeded_files, folder, check_model_dir(folder))

    assert says in str(error) and error.code == "unneeded_file"
