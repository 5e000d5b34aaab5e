"""Checks of a user's Hugging Face model before anything of it is stored.

An upload is an archive (.tar.gz/.tgz, .tar or .zip) of a model folder: config.json of a supported
architecture, safetensors weights whose every tensor has the shape the config implies, and a
tokenizer. `extract_archive` unpacks it safely (no member outside the destination, no links or
devices, bounded sizes counted while decompressing, so a zip bomb stops at the limit);
`check_model_dir` checks the folder, reading only the safetensors headers (pickled weights are
refused by name, never opened). Every refusal is a `ModelFileError` whose message names the
problem and what to do about it.

No Django: the platform's services call this, and so can a compute host. Shapes and parameter
counts come from workers.hfconfig (laid out from the config, no torch); the tokenizer is loaded with
transformers' AutoTokenizer from local files only.
"""

from __future__ import annotations

import errno
import gzip
import json
import math
import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from workers import hfconfig
from workers.modelspecs import spec_from_config

GIB = 1024**3
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
SAVE_SAFELY = "model.save_pretrained(dir, safe_serialization=True)"
PACK_IT = (
    "Pack the model folder (config.json, model.safetensors, tokenizer files) with "
    "`tar czf model.tar.gz -C DIR .`, or upload it with `starverse model upload DIR`."
)
# Bytes per element of each safetensors dtype; only floating-point weights can be trained.
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
TRAINABLE_DTYPES = ("BF16", "F16", "F32", "F64")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own bound
MAX_CONFIG_BYTES = 1024 * 1024
COPY_CHUNK = 1024 * 1024
# What an archive may hold beside file content: headers, names, a zip's directory.
MAX_METADATA_BYTES = 64 * 1024 * 1024
SHOWN_PROBLEMS = 5
# Folders and files that archivers add beside the content (macOS Finder's "Compress").
ARCHIVER_LITTER = ("__MACOSX", ".DS_Store")


class ModelFileError(ValueError):
    """An upload that can't be trained; the message says what is wrong and what to do.

    `code` names the kind of problem for programs: not_an_archive, unsafe_archive, pickle_weights,
    unsupported_model, weights_mismatch, missing_tokenizer, ...
    """

    def __init__(self, message: str, code: str = "invalid_model"):
        super().__init__(message)
        self.code = code


class ModelTooLarge(ModelFileError):
    """An upload over the size limit (the API answers 413)."""


@dataclass(frozen=True)
class Limits:
    """How much an upload may be: archive bytes, bytes once unpacked, and files in it."""

    max_archive_bytes: int = 20 * GIB
    max_extracted_bytes: int = 20 * GIB
    max_members: int = 10_000


@dataclass(frozen=True)
class ModelFiles:
    """What the checks learnt of a valid model folder."""

    architecture: str
    parameters: int
    shape: dict
    config: dict
    size_bytes: int
    has_chat_template: bool
    max_position_embeddings: int | None


@dataclass(frozen=True)
class Tensor:
    shard: str
    dtype: str
    shape: tuple[int, ...]


# -- archives --------------------------------------------------------------------------------------


def extract_archive(archive: Path, destination: Path, limits: Limits) -> Path:
    """Unpack the archive into `destination` (an empty folder); returns the model folder in it.

    That is `destination` itself, or the archive's single top-level folder when everything is in one.
    """
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise too_large(f"The archive is {size:,} bytes", limits.max_archive_bytes)
    budget = Budget(limits)
    kind = archive_kind(archive)
    if kind == "zip":
        extract_zip(archive, destination, budget)
    else:
        extract_tar(archive, kind == "tar.gz", destination, budget)
    entries = list(destination.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return destination


def archive_kind(archive: Path) -> str:
    """zip, tar.gz or tar, told by the content (names lie)."""
    with open(archive, "rb") as file:
        head = file.read(512)
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    raise ModelFileError(f"The upload is not a .tar.gz, .tgz, .tar or .zip archive. {PACK_IT}", code="not_an_archive")


def too_large(what: str, limit: int) -> ModelTooLarge:
    message = f"{what}; the limit is {limit:,} bytes. Upload the model in safetensors without extra files."
    return ModelTooLarge(message, code="model_too_large")


def too_many_files(limit: int) -> ModelFileError:
    message = f"The archive has more than {limit:,} files; a model folder needs a few dozen."
    return ModelFileError(message, code="too_many_files")


@dataclass
class Budget:
    """Members and bytes unpacked so far, refused past the limits as they are counted."""

    limits: Limits
    members: int = 0
    written: int = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise too_many_files(self.limits.max_members)

    def add(self, count: int) -> None:
        self.written += count
        if self.written > self.limits.max_extracted_bytes:
            raise too_large("The archive unpacks to more than that", self.limits.max_extracted_bytes)


def member_path(name: str) -> PurePosixPath | None:
    """The member's path inside the model folder; None for the archive's root or archivers' litter."""
    if "\x00" in name:
        raise ModelFileError(f"The archive member {name!r} has a NUL character in its name.", code="unsafe_archive")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise ModelFileError(
            f"The archive member '{name}' has an absolute path, which is refused. {PACK_IT}", code="unsafe_archive"
        )
    parts = [part for part in re.split(r"[/\\]", name) if part not in ("", ".")]
    if ".." in parts:
        raise ModelFileError(
            f"The archive member '{name}' points outside the model folder ('..'); it is refused.", code="unsafe_archive"
        )
    if not parts or parts[0] in ARCHIVER_LITTER or parts[-1] in ARCHIVER_LITTER:
        return None
    return PurePosixPath(*parts)


def refuse_pickle(name: str) -> None:
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise ModelFileError(
            f"'{name}' is a pickle file, which can run code when loaded and is never opened here. "
            f"Convert the weights to safetensors: {SAVE_SAFELY}, and upload without the pickle files.",
            code="pickle_weights",
        )


def make_folder(destination: Path, relative: PurePosixPath) -> None:
    try:
        destination.joinpath(relative).mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ModelFileError(
            f"The archive has both a file and a folder named '{relative}'.", code="invalid_archive"
        ) from None


def write_member(source: BinaryIO, destination: Path, relative: PurePosixPath, budget: Budget) -> None:
    """Copy one member's bytes into a new private file, counting them against the budget."""
    refuse_pickle(str(relative))
    make_folder(destination, relative.parent)
    target = destination.joinpath(relative)
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        raise ModelFileError(f"The archive holds '{relative}' twice.", code="invalid_archive") from None
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG):
            raise ModelFileError(
                f"The archive member '{relative}' can't be unpacked: {error.strerror}.", code="invalid_archive"
            ) from None
        raise
    with os.fdopen(descriptor, "wb") as target_file:
        while chunk := source.read(COPY_CHUNK):
            budget.add(len(chunk))
            target_file.write(chunk)


class MeteredTarStream:
    """The decompressed tar stream, refused once what isn't file content (headers, names) passes MAX_METADATA_BYTES.

    tarfile reads a long name or a PAX header into memory whole; a header that claims gigabytes would
    otherwise be read before any limit on files is reached.
    """

    def __init__(self, raw: BinaryIO, budget: Budget):
        self.raw, self.budget, self.read_bytes = raw, budget, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.read_bytes += len(chunk)
        # File content is copied in COPY_CHUNK pieces as soon as it is read, so it trails by at most one piece.
        if self.read_bytes - self.budget.written > MAX_METADATA_BYTES + COPY_CHUNK:
            raise ModelFileError(
                f"The archive's headers and names are over {MAX_METADATA_BYTES:,} bytes; it is refused. {PACK_IT}",
                code="invalid_archive",
            )
        return chunk


def extract_tar(archive: Path, compressed: bool, destination: Path, budget: Budget) -> None:
    """Stream the tar once, member by member: each is checked before a byte of it is written."""
    try:
        with (
            (gzip.open if compressed else open)(archive, "rb") as raw,
            tarfile.open(fileobj=MeteredTarStream(raw, budget), mode="r|") as tar,
        ):
            for member in tar:
                budget.member()
                relative = member_path(member.name)
                if member.issym() or member.islnk():
                    raise ModelFileError(
                        f"The archive member '{member.name}' is a link; links are refused. Archive real files "
                        "(e.g. `tar czhf`, which stores the files that links point to).",
                        code="unsafe_archive",
                    )
                if not (member.isreg() or member.isdir()):
                    raise ModelFileError(
                        f"The archive member '{member.name}' is a device, pipe or other special file; "
                        "only files and folders are accepted.",
                        code="unsafe_archive",
                    )
                if relative is None:
                    continue
                if member.isdir():
                    make_folder(destination, relative)
                    continue
                write_member(tar.extractfile(member), destination, relative, budget)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ModelFileError(
            f"The archive is damaged or not a tar archive ({error}). {PACK_IT}", code="invalid_archive"
        ) from None


def extract_zip(archive: Path, destination: Path, budget: Budget) -> None:
    """Check every member of the zip's directory first, then unpack, counting the bytes actually inflated."""
    check_zip_directory(archive, budget.limits)
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            for info in members:
                budget.member()
                member_path(info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)
                if kind == stat.S_IFLNK:
                    raise ModelFileError(
                        f"The archive member '{info.filename}' is a link; links are refused.", code="unsafe_archive"
                    )
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise ModelFileError(
                        f"The archive member '{info.filename}' is a device, pipe or other special file; "
                        "only files and folders are accepted.",
                        code="unsafe_archive",
                    )
                if info.flag_bits & 0x1:
                    raise ModelFileError(
                        f"The archive member '{info.filename}' is encrypted; upload it unencrypted.",
                        code="invalid_archive",
                    )
            for info in members:
                relative = member_path(info.filename)
                if relative is None:
                    continue
                if info.is_dir():
                    make_folder(destination, relative)
                    continue
                with bundle.open(info) as source:
                    write_member(source, destination, relative, budget)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
        raise ModelFileError(
            f"The archive is damaged or not a zip archive ({error}). {PACK_IT}", code="invalid_archive"
        ) from None


def check_zip_directory(archive: Path, limits: Limits) -> None:
    """Refuse a zip whose directory declares too many members or too many bytes, before zipfile reads it all
    into memory (it builds every member's entry at once)."""
    with open(archive, "rb") as file:
        end = zipfile._EndRecData(file)  # the end-of-directory record, zip64 included, as ZipFile reads it
    if end is None:
        return  # not a zip after all: ZipFile says so
    if end[zipfile._ECD_ENTRIES_TOTAL] > limits.max_members:
        raise too_many_files(limits.max_members)
    if end[zipfile._ECD_SIZE] > MAX_METADATA_BYTES:
        raise ModelFileError(
            f"The archive's directory is over {MAX_METADATA_BYTES:,} bytes; it is refused. {PACK_IT}",
            code="invalid_archive",
        )


# -- the model folder ------------------------------------------------------------------------------


def check_model_dir(directory: Path) -> ModelFiles:
    """Check a model folder (unpacked upload or Hugging Face cache snapshot) and describe it."""
    files = folder_files(directory)
    for name in files:
        refuse_pickle(name)
    config = read_config(directory, files)
    architecture = unsupported_as_error(hfconfig.model_type, config)
    tensors = read_weights(directory, files)
    check_plausible_size(config, tensors)
    expected = unsupported_as_error(hfconfig.parameter_shapes, config)
    compare_weights(expected, tensors)
    shape = unsupported_as_error(hfconfig.model_shape, config)
    has_chat_template = check_tokenizer(directory, files, config)
    return ModelFiles(
        architecture=architecture,
        parameters=shape.parameters,
        shape=shape.as_dict(),
        config=config,
        size_bytes=sum(path.stat().st_size for path in files.values()),
        has_chat_template=has_chat_template,
        max_position_embeddings=config.get("max_position_embeddings"),
    )


def folder_files(directory: Path) -> dict[str, Path]:
    """Every file under the folder by its relative POSIX name (a cache snapshot's links are followed)."""
    return {
        path.relative_to(directory).as_posix(): path
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name not in ARCHIVER_LITTER
    }


def unsupported_as_error(check, config: dict):
    try:
        return check(config)
    except hfconfig.UnsupportedModel as error:
        raise ModelFileError(str(error), code="unsupported_model") from None


def read_config(directory: Path, files: dict[str, Path]) -> dict:
    if "config.json" not in files:
        found = ", ".join(list(files)[:6]) or "nothing"
        raise ModelFileError(
            f"No config.json at the top of the model folder (found: {found}). Save the model with "
            f"{SAVE_SAFELY}, which writes config.json beside the weights.",
            code="missing_config",
        )
    path = directory / "config.json"
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelFileError(
            f"config.json is over {MAX_CONFIG_BYTES:,} bytes; a model's config is a few kilobytes.",
            code="invalid_config",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ModelFileError(f"config.json is not valid JSON: {error}.", code="invalid_config") from None
    if not isinstance(config, dict):
        raise ModelFileError("config.json must hold a JSON object of the model's settings.", code="invalid_config")
    return config


def read_weights(directory: Path, files: dict[str, Path]) -> dict[str, Tensor]:
    """Every tensor's dtype and shape, from model.safetensors or the shards its index names."""
    if "model.safetensors" in files:
        shards = ["model.safetensors"]
        weight_map = None
    elif "model.safetensors.index.json" in files:
        weight_map = read_index(directory / "model.safetensors.index.json")
        shards = sorted(set(weight_map.values()))
        missing = [shard for shard in shards if shard not in files]
        if missing:
            raise ModelFileError(
                f"model.safetensors.index.json names shard(s) the upload lacks: {', '.join(missing[:3])}. "
                "Upload every shard beside the index.",
                code="missing_weights",
            )
    else:
        others = [name for name in files if name.endswith(".safetensors")]
        found = f" (found {', '.join(others[:3])})" if others else ""
        raise ModelFileError(
            f"No weights: expected model.safetensors, or model.safetensors.index.json and its shards{found}. "
            f"Save them with {SAVE_SAFELY}.",
            code="missing_weights",
        )
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        for name, (dtype, shape) in read_header(directory / shard, shard).items():
            if name in tensors:
                raise ModelFileError(
                    f"The tensor {name} is in both {tensors[name].shard} and {shard}.", code="invalid_weights"
                )
            tensors[name] = Tensor(shard, dtype, shape)
    for name, shard in (weight_map or {}).items():
        if tensors.get(name) is None or tensors[name].shard != shard:
            raise ModelFileError(
                f"model.safetensors.index.json puts {name} in {shard}, which doesn't hold it.", code="invalid_weights"
            )
    return tensors


def read_index(path: Path) -> dict[str, str]:
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ModelFileError(
            f"model.safetensors.index.json is not valid JSON: {error}.", code="invalid_weights"
        ) from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()
    ):
        raise ModelFileError(
            'model.safetensors.index.json needs a "weight_map" of tensor names to shard files.', code="invalid_weights"
        )
    return weight_map


def read_header(path: Path, shown: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A safetensors file's tensors (dtype, shape) from its header: 8-byte little-endian length, then JSON.

    The tensors themselves are never read; their byte ranges are checked against the file's size.
    """
    size = path.stat().st_size
    damaged = f"{shown} is not a valid safetensors file"
    with open(path, "rb") as file:
        prefix = file.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if not 0 < length <= min(MAX_HEADER_BYTES, size - 8):
            raise ModelFileError(
                f"{damaged} (its header is missing or damaged). Save it with {SAVE_SAFELY}.", code="invalid_weights"
            )
        try:
            header = json.loads(file.read(length))
        except (ValueError, UnicodeDecodeError):
            raise ModelFileError(
                f"{damaged} (its header is not JSON). Save it with {SAVE_SAFELY}.", code="invalid_weights"
            ) from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{damaged} (its header is not a JSON object).", code="invalid_weights")
    data_bytes = size - 8 - length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, begin, end = tensor_entry(info)
        if dtype is None or not 0 <= begin <= end <= data_bytes or end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise ModelFileError(
                f"{damaged}: the entry of {name} is damaged or the file is truncated.", code="invalid_weights"
            )
        if dtype not in TRAINABLE_DTYPES:
            raise ModelFileError(
                f"{name} is stored as {dtype}; only floating-point weights ({', '.join(TRAINABLE_DTYPES)}) can be "
                "trained here. Upload the model before quantization.",
                code="invalid_weights",
            )
        tensors[name] = (dtype, shape)
    return tensors


def tensor_entry(info) -> tuple[str | None, tuple[int, ...], int, int]:
    """(dtype, shape, begin, end) of a header entry; dtype None when the entry is malformed."""
    malformed = (None, (), 0, 0)
    if not isinstance(info, dict):
        return malformed
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BYTES or not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
        return malformed
    numbers = [*shape, *offsets]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        return malformed
    return dtype, tuple(shape), offsets[0], offsets[1]


def check_plausible_size(config: dict, tensors: dict[str, Tensor]) -> None:
    """Refuse a config far bigger than its weights before building it (a huge config takes long to build)."""
    try:
        estimate = spec_from_config("upload", config, 1).llama_parameters
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return  # malformed: hfconfig says what is wrong
    stored = sum(math.prod(tensor.shape) for tensor in tensors.values())
    if estimate > 2 * stored + 1_000_000:
        raise ModelFileError(
            f"config.json describes a model of about {estimate:,} parameters, but the weights hold {stored:,}: "
            f"they don't belong together. Save both with {SAVE_SAFELY}.",
            code="weights_mismatch",
        )


def compare_weights(expected: dict[str, tuple[int, ...]], tensors: dict[str, Tensor]) -> None:
    """Every tensor the config needs, with its shape, and nothing else (a tied lm_head may be saved or not)."""
    problems = []
    for name, shape in expected.items():
        tensor = tensors.get(name)
        if tensor is None:
            problems.append(f"{name} is missing (config.json implies {list(shape)})")
        elif tensor.shape != shape:
            problems.append(f"{name} has shape {list(tensor.shape)}; config.json implies {list(shape)}")
    embeddings = expected.get("model.embed_tokens.weight")
    for name in tensors.keys() - expected.keys():
        if name == "lm_head.weight" and tensors[name].shape == embeddings:
            continue  # tied to the embeddings; saved anyway
        problems.append(f"{name} is not a weight of this config's model")
    if problems:
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise ModelFileError(
            f"The weights don't match config.json: {'; '.join(problems[:SHOWN_PROBLEMS])}{more}. "
            f"Upload the config.json the weights were saved with ({SAVE_SAFELY}).",
            code="weights_mismatch",
        )


def check_tokenizer(directory: Path, files: dict[str, Path], config: dict) -> bool:
    """The tokenizer loads from the folder alone and fits the embeddings; returns whether it has a chat template."""
    vocabulary = {"tokenizer.model", "vocab.json", "vocab.txt", "spiece.model"} & files.keys()
    if "tokenizer.json" not in files and not (vocabulary and "tokenizer_config.json" in files):
        raise ModelFileError(
            "No tokenizer: add tokenizer.json (or tokenizer.model / vocab files with tokenizer_config.json), "
            "e.g. with tokenizer.save_pretrained(dir) into the model folder.",
            code="missing_tokenizer",
        )
    tokenizers = hfconfig.import_transformers().AutoTokenizer
    try:
        tokenizer = tokenizers.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except Exception as error:  # a third-party loader failing on user files, in any way, is a refusal
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelFileError(
            f"The tokenizer can't be loaded ({reason[:300]}). Save it with tokenizer.save_pretrained(dir).",
            code="invalid_tokenizer",
        ) from None
    vocab_size = config.get("vocab_size")
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise ModelFileError(
            f"The tokenizer has {len(tokenizer):,} tokens but config.json's vocab_size is {vocab_size:,}: "
            "token ids past the embeddings can't be trained. Resize the embeddings "
            "(model.resize_token_embeddings(len(tokenizer))) and save again.",
            code="invalid_tokenizer",
        )
    return bool(getattr(tokenizer, "chat_template", None))
