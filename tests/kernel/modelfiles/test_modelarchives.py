"""Unpacking an uploaded model's archive before anything is stored (kernel.modelfiles.archives): formats, unsafe
and broken archives, bounds, and which members are kept."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile

import pytest

from kernel.modelfiles import archives as modelarchives
from kernel.modelfiles.archives import Limits, extract_archive
from kernel.modelfiles.checks import check_model_dir
from kernel.modelfiles.errors import ModelTooLarge
from kernel.modelfiles.loaders import refuse_unneeded_files
from tests.support.model_archives import copy_model, member, pack, refusal, tar_with

DEFAULT_LIMITS = Limits()


def unpack(archive, tmp_path, limits: Limits = DEFAULT_LIMITS):
    destination = tmp_path / "unpacked"
    destination.mkdir()
    return extract_archive(archive, destination, limits)


# -- archives that unpack --------------------------------------------------------------------------


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


def test_a_tar_member_named_twice_is_refused(model_dirs, tmp_path):
    archive = tmp_path / "m.tar"
    with tarfile.open(archive, "w") as tar:
        for _ in range(2):
            info = tarfile.TarInfo("config.json")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))

    assert "holds 'config.json' twice" in str(refusal(unpack, archive, tmp_path))


# -- what an archive may hold ----------------------------------------------------------------------


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
