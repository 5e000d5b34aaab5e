"""The weights of a user's model, from their safetensors headers alone: every tensor's name, dtype and shape.

The tensors themselves are never read. A header is bounded (MAX_HEADER_BYTES, MAX_TENSORS: the
safetensors library allows a 100 MiB header, which json.loads turns into gigabytes), and its byte ranges
must tile the data exactly, as the safetensors library demands (check_contiguous). No Django.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from kernel.modelfiles.errors import SAVE_SAFELY, ModelFileError, read_json
from kernel.words import Words

# Bytes per element of each safetensors dtype; only floating-point weights can be trained.
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
TRAINABLE_DTYPES = ("BF16", "F16", "F32", "F64")
# A header is ~150 bytes per tensor, and the largest config (hfconfig.MAX_SIZES) has a few thousand
# tensors; the safetensors library allows 100 MiB, which json.loads turns into gigabytes of objects.
MAX_HEADER_BYTES = 8 * 1024 * 1024
MAX_TENSORS = 16 * 4096  # more than any config within hfconfig.MAX_SIZES has, shards together


@dataclass(frozen=True)
class Tensor:
    """One tensor of the weights: the file it is in, its dtype and its shape."""

    shard: str
    dtype: str
    shape: tuple[int, ...]


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
            raise ModelFileError.of(
                "model.safetensors.index.json names shard(s) the upload lacks: %(shards)s. "
                "Upload every shard beside the index.",
                code="missing_weights",
                shards=", ".join(missing[:3]),
            )
    else:
        others = [name for name in files if name.endswith(".safetensors")]
        if others:
            raise ModelFileError.of(
                "No weights: expected model.safetensors, or model.safetensors.index.json and its shards "
                "(found %(found)s). Save them with " + SAVE_SAFELY + ".",
                code="missing_weights",
                found=", ".join(others[:3]),
            )
        raise ModelFileError.of(
            "No weights: expected model.safetensors, or model.safetensors.index.json and its shards. "
            "Save them with " + SAVE_SAFELY + ".",
            code="missing_weights",
        )
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        for name, (dtype, shape) in read_header(directory / shard, shard).items():
            if len(tensors) >= MAX_TENSORS:
                raise ModelFileError.of(
                    "The weights name over %(limit)s tensors.", code="invalid_weights", limit=f"{MAX_TENSORS:,}"
                )
            if name in tensors:
                raise ModelFileError.of(
                    "The tensor %(name)s is in both %(first)s and %(second)s.",
                    code="invalid_weights",
                    name=name,
                    first=tensors[name].shard,
                    second=shard,
                )
            tensors[name] = Tensor(shard, dtype, shape)
    for name, shard in (weight_map or {}).items():
        if tensors.get(name) is None or tensors[name].shard != shard:
            raise ModelFileError.of(
                "model.safetensors.index.json puts %(name)s in %(shard)s, which doesn't hold it.",
                code="invalid_weights",
                name=name,
                shard=shard,
            )
    return tensors


def read_index(path: Path) -> dict[str, str]:
    index = read_json(path, "model.safetensors.index.json", "invalid_weights")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()
    ):
        raise ModelFileError.of(
            'model.safetensors.index.json needs a "weight_map" of tensor names to shard files.', code="invalid_weights"
        )
    return weight_map


def read_header(path: Path, shown: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A safetensors file's tensors (dtype, shape) from its header: 8-byte little-endian length, then JSON.

    The tensors themselves are never read; their byte ranges are checked against the file's size and
    against each other (check_contiguous).
    """
    damaged = Words.of("%(file)s is not a valid safetensors file", file=shown)
    header, data_bytes = load_header(path, damaged)
    tensors, ranges = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, begin, end = tensor_entry(info)
        if dtype is None or not 0 <= begin <= end <= data_bytes or end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise ModelFileError.of(
                "%(damaged)s: the entry of %(name)s is damaged or the file is truncated.",
                code="invalid_weights",
                damaged=damaged,
                name=name,
            )
        if dtype not in TRAINABLE_DTYPES:
            raise ModelFileError.of(
                "%(name)s is stored as %(dtype)s; only floating-point weights (%(trainable)s) can be "
                "trained here. Upload the model before quantization.",
                code="invalid_weights",
                name=name,
                dtype=dtype,
                trainable=", ".join(TRAINABLE_DTYPES),
            )
        tensors[name] = (dtype, shape)
        ranges.append((begin, end, name))
    check_contiguous(ranges, data_bytes, damaged)
    return tensors


def load_header(path: Path, damaged: Words) -> tuple[dict, int]:
    """The header as a JSON object, and how many bytes of tensor data follow it."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        prefix = file.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if length > MAX_HEADER_BYTES:
            raise ModelFileError.of(
                "%(damaged)s: its header is %(length)s bytes; at most %(limit)s are read (a header names "
                "each tensor in about 150 bytes).",
                code="invalid_weights",
                damaged=damaged,
                length=f"{length:,}",
                limit=f"{MAX_HEADER_BYTES:,}",
            )
        if not 0 < length <= size - 8:
            raise ModelFileError.of(
                "%(damaged)s (its header is missing or damaged). Save it with " + SAVE_SAFELY + ".",
                code="invalid_weights",
                damaged=damaged,
            )
        try:
            header = json.loads(file.read(length))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ModelFileError.of(
                "%(damaged)s (its header is not JSON). Save it with " + SAVE_SAFELY + ".",
                code="invalid_weights",
                damaged=damaged,
            ) from None
    if not isinstance(header, dict):
        raise ModelFileError.of(
            "%(damaged)s (its header is not a JSON object).", code="invalid_weights", damaged=damaged
        )
    if len(header) > MAX_TENSORS:
        raise ModelFileError.of(
            "%(damaged)s: it names over %(limit)s tensors.",
            code="invalid_weights",
            damaged=damaged,
            limit=f"{MAX_TENSORS:,}",
        )
    return header, size - 8 - length


def check_contiguous(ranges: list[tuple[int, int, str]], data_bytes: int, damaged: Words) -> None:
    """The tensors' bytes, in order, cover the data from its first byte to its last, each range right after the
    one before: no gap, no overlap, nothing after the last (the safetensors library refuses anything else; a
    gap or a tail is bytes no loader reads, stored for nothing)."""
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            how = (
                Words("overlapping the tensor before it")
                if begin < position
                else Words.of("%(count)s unused bytes after", count=f"{begin - position:,}")
            )
            raise ModelFileError.of(
                "%(damaged)s: the bytes of %(name)s start at %(begin)s, not at %(position)s (%(how)s). "
                "Save it with " + SAVE_SAFELY + ".",
                code="invalid_weights",
                damaged=damaged,
                name=name,
                begin=f"{begin:,}",
                position=f"{position:,}",
                how=how,
            )
        position = end
    if position != data_bytes:
        raise ModelFileError.of(
            "%(damaged)s: %(count)s bytes follow its last tensor, which no loader reads. Save it with "
            + SAVE_SAFELY
            + ".",
            code="invalid_weights",
            damaged=damaged,
            count=f"{data_bytes - position:,}",
        )


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
