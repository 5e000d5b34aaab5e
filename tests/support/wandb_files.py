"""Reading a W&B offline run's `run-<id>.wandb` file back in tests: the records its metrics were logged in.

The file is a LevelDB-style log (wandb's own format, written by its Go core, which has no Python reader): a
7-byte header (":W&B", magic, version), then 32 KiB blocks of chunks, each with a 7-byte header (CRC, length,
type: full, first, middle, last) holding serialised `Record` protobufs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

BLOCK, CHUNK_HEADER, FILE_HEADER = 32768, 7, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pending = FILE_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        space = BLOCK - pos % BLOCK
        if space < CHUNK_HEADER:  # a block's tail too short for a header is padding
            pos += space
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk, pos = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length], pos + CHUNK_HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
        elif kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK  # zero padding to the block's end


def history(path: Path) -> list[dict]:
    """Every `run.log` row of the run file: {metric: value}."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for data in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows
