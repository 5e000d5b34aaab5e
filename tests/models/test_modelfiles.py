"""Checks of an uploaded model before anything is stored (workers.modelfiles): archives, weights, tokenizer."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile

import pytest
from safetensors.torch import load_file, save_file

from tests.hfmodels import make_model_dir
from tests.models.conftest import copy_model, member, pack, tar_with
from workers import hfconfig, modelarchives, modelweights
from workers.loaderfiles import refuse_unneeded_files
from workers.modelarchives import Limits, extract_archive
from workers.modelfiles import ModelFileError, ModelTooLarge, check_model_dir

DEFAULT_LIMITS = Limits()


def unpack(archive, tmp_path, limits: Limits = DEFAULT_LIMITS):
    destination = tmp_path / "unpacked"
    destination.mkdir()
    return extract_archive(archive, destination, limits)


def refusal(check, *args) -> ModelFileError:
    with pytest.raises(ModelFileError) as refused:
        check(*args)
    return refused.value


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


@pytest.mark.parametrize(
    ("archive_name", "top"), [("m.tar.gz", None), ("m.tgz", "my-model"), ("m.tar", None), ("m.zip", "my-model")]
)
def test_each_archive_format_unpacks_with_or_without_one_top_level_folder(model_dirs, tmp_path, archive_name, top):
    archive = pack(model_dirs["llama"], tmp_path / archive_name, top=top)

    root = unpack(archive, tmp_path)

    assert root.name == (top or "unpacked")
    assert check_model_dir(root).architecture == "llama"


def test_unpacked_files_and_folders_are_private(model_dirs, tmp_path):
    root = unpack(pack(model_dirs["llama"], tmp_path / "m.zip", top="m"), tmp_path)

    modes = {stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")} | {stat.S_IMODE(root.stat().st_mode)}
    assert modes == {0o600, 0o700}


def test_the_kind_of_archive_is_told_by_its_content_not_its_name(model_dirs, tmp_path):
    archive = pack(model_dirs["llama"], tmp_path / "m.zip")

    assert (unpack(archive.rename(tmp_path / "m.tar.gz"), tmp_path) / "config.json").is_file()


# -- unsafe or broken archives ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("crafted", "says"),
    [
        (member("../escaped"), "outside the model folder"),
        (member("sub/../../escaped"), "outside the model folder"),
        (member("/tmp/escaped"), "absolute path"),
        (member("config-link", tarfile.SYMTYPE, link="/etc/passwd"), "is a link"),
        (member("hard-link", tarfile.LNKTYPE, link="config.json"), "is a link"),
        (member("device", tarfile.CHRTYPE), "special file"),
        (member("pipe", tarfile.FIFOTYPE), "special file"),
    ],
    ids=["dot-dot", "nested-dot-dot", "absolute", "symlink", "hardlink", "device", "fifo"],
)
def test_members_that_escape_or_are_not_plain_files_are_refused(model_dirs, tmp_path, crafted, says):
    archive = tar_with(tmp_path / "m.tar.gz", model_dirs["llama"], crafted, data=b"x")

    error = refusal(unpack, archive, tmp_path)

    assert says in str(error) and error.code == "unsafe_archive"
    assert not (tmp_path / "escaped").exists()


def test_a_link_in_a_zip_is_refused(model_dirs, tmp_path):
    archive = pack(model_dirs["llama"], tmp_path / "m.zip")
    link = zipfile.ZipInfo("tokenizer-link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(archive, "a") as bundle:
        bundle.writestr(link, "/etc/passwd")

    assert "is a link" in str(refusal(unpack, archive, tmp_path))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "weights/model.pt", "optimizer.pth", "state.pkl", "last.ckpt"])
def test_pickled_weights_are_refused_by_name_and_never_opened(model_dirs, tmp_path, name):
    pickle = member(name)
    archive = tar_with(tmp_path / "m.tar.gz", model_dirs["llama"], pickle, data=b"\x80\x04boom!")

    error = refusal(unpack, archive, tmp_path)

    assert "pickle" in str(error) and "safe_serialization=True" in str(error)
    assert error.code == "pickle_weights"


def test_a_file_that_is_no_archive_is_refused_saying_how_to_pack_one(tmp_path):
    text = tmp_path / "model.tar.gz"
    text.write_text("config and weights, I promise")

    error = refusal(unpack, text, tmp_path)

    assert "not a .tar.gz, .tgz, .tar or .zip archive" in str(error) and "tar czf" in str(error)


def test_a_damaged_archive_is_refused(model_dirs, tmp_path):
    archive = pack(model_dirs["llama"], tmp_path / "m.tar.gz")
    archive.write_bytes(archive.read_bytes()[:5000])

    assert refusal(unpack, archive, tmp_path).code == "invalid_archive"


def test_an_archive_over_the_limit_is_refused_before_it_is_unpacked(model_dirs, tmp_path):
    archive = pack(model_dirs["llama"], tmp_path / "m.tar.gz")

    with pytest.raises(ModelTooLarge, match="the limit is 1,000 bytes"):
        unpack(archive, tmp_path, Limits(max_archive_bytes=1000))
    assert not any((tmp_path / "unpacked").iterdir())


def test_a_zip_bomb_stops_at_the_unpacked_limit(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("model.safetensors", bytes(50 * 1024 * 1024))
    assert bomb.stat().st_size < 100_000

    with pytest.raises(ModelTooLarge, match="unpacks to more than that"):
        unpack(bomb, tmp_path, Limits(max_extracted_bytes=2 * 1024 * 1024))
    written = sum(p.stat().st_size for p in (tmp_path / "unpacked").rglob("*") if p.is_file())
    assert written <= 3 * 1024 * 1024


@pytest.mark.parametrize("archive_name", ["m.tar.gz", "m.zip"])
def test_an_archive_of_too_many_files_is_refused(model_dirs, tmp_path, archive_name):
    archive = pack(model_dirs["llama"], tmp_path / archive_name)

    error = refusal(unpack, archive, tmp_path, Limits(max_members=3))

    assert "more than 3 files" in str(error) and error.code == "too_many_files"


def test_a_tar_header_claiming_more_than_the_metadata_limit_is_refused_before_it_is_read(
    model_dirs, tmp_path, monkeypatch
):
    monkeypatch.setattr(modelarchives, "MAX_METADATA_BYTES", 1024 * 1024)
    long_name = member("x" * (3 * 1024 * 1024))  # a PAX header of 3 MiB, read whole by tarfile
    archive = tar_with(tmp_path / "m.tar.gz", model_dirs["llama"], long_name, data=b"x")

    error = refusal(unpack, archive, tmp_path)

    assert "headers and names are over 1,048,576 bytes" in str(error)


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


def test_a_tar_member_named_twice_is_refused(model_dirs, tmp_path):
    archive = tmp_path / "m.tar"
    with tarfile.open(archive, "w") as tar:
        for _ in range(2):
            info = tarfile.TarInfo("config.json")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))

    assert "holds 'config.json' twice" in str(refusal(unpack, archive, tmp_path))


# -- what an upload may hold -----------------------------------------------------------------------


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


def test_a_model_card_and_a_licence_are_left_out_and_named_templates_kept(model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "m")
    (folder / "README.md").write_text("# my model")
    (folder / "LICENSE").write_text("MIT")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages }}")

    for archive in (pack(folder, tmp_path / "m.zip", top="m"), pack(folder, tmp_path / "m.tar.gz")):
        (scratch := tmp_path / archive.name.replace(".", "-")).mkdir()
        root = unpack(archive, scratch)
        names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        assert "README.md" not in names and "LICENSE" not in names
        assert "additional_chat_templates/tool_use.jinja" in names
        refuse_unneeded_files(root, check_model_dir(root))


@pytest.mark.parametrize(
    ("name", "size", "says"),
    [
        ("padding.dat", 10, "'padding.dat' is not a file any loader reads"),
        ("README.md", 2 * 1024 * 1024, "'README.md' is 2,097,152 bytes; such a file is at most 1,048,576 bytes"),
        ("config.json", 2 * 1024 * 1024, "'config.json' is 2,097,152 bytes; such a file is at most 1,048,576"),
        ("deep/down/tokenizer.json", 10, "is in a subfolder; a model folder keeps its files at its top"),
    ],
)
@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_a_member_no_loader_reads_or_over_its_bound_is_refused_before_it_is_written(
    model_dirs, tmp_path, kind, name, size, says
):
    archive = tmp_path / f"m.{kind}"
    if kind == "zip":
        pack(model_dirs["llama"], archive)
        with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr(name, bytes(size))
    else:
        tar_with(archive, model_dirs["llama"], member(name), data=bytes(size))

    error = refusal(unpack, archive, tmp_path)

    assert says in str(error) and error.code == "unneeded_file"
    unpacked = [path for path in (tmp_path / "unpacked").rglob("*") if path.is_file()]
    assert all(path.stat().st_size != size for path in unpacked)  # not a byte of it was kept


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
