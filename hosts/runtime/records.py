"""Encoded dataset records into training windows and evaluation examples, and the held-out split.

Reading and checking a dataset file is kernel.datasets.files; turning a record into token ids and
a loss mask, kernel.datasets.tokens. No torch: the platform imports this beside them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

import numpy as np

from kernel.datasets.files import DatasetError
from kernel.datasets.tokens import Encoded


def pack(encoded: Iterable[Encoded], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64, mask bool), both (windows, seq_len + 1): the records in order as one stream, cut
    into windows overlapping by one token (window i = stream[i*seq_len : i*seq_len + seq_len + 1]).

    The last partial window is padded with id 0, masked out; a stream shorter than one window is
    repeated to fill it.
    """
    if seq_len < 1:
        raise DatasetError(f"The sequence length must be at least 1, not {seq_len}.")
    parts = [(np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=bool)) for ids, mask in encoded]
    ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    mask = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=bool)
    if not mask.any():
        raise DatasetError("Dataset has no token to train on: every loss mask is empty.")
    length = seq_len + 1
    if ids.size < length:
        ids, mask = np.resize(ids, length), np.resize(mask, length)
    windows = math.ceil((ids.size - 1) / seq_len)
    padding = windows * seq_len + 1 - ids.size
    ids = np.concatenate([ids, np.zeros(padding, dtype=np.int64)])
    mask = np.concatenate([mask, np.zeros(padding, dtype=bool)])
    index = np.arange(windows)[:, None] * seq_len + np.arange(length)[None, :]
    return ids[index], mask[index]


def eval_examples(encoded: Iterable[Encoded], seq_len: int) -> list[Encoded]:
    """Each record on its own, cut to its first seq_len + 1 tokens, for a per-record eval loss.

    Records with no target left (no masked-in token after the first) can't be scored and are left
    out; none at all raises DatasetError.
    """
    examples = [(list(ids[: seq_len + 1]), list(mask[: seq_len + 1])) for ids, mask in encoded]
    examples = [(ids, mask) for ids, mask in examples if any(mask[1:])]
    if not examples:
        raise DatasetError(
            f"No evaluation record has a token to score within its first {seq_len + 1} tokens "
            "(the sequence length plus one)."
        )
    return examples


def split_holdout(records: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(training records, held-out records): a `fraction` of the records chosen by `seed`, at least
    one on each side; each side keeps the file's order."""
    if not 0 < fraction < 1:
        raise DatasetError(f"The held-out fraction must be between 0 and 1, not {fraction}.")
    if len(records) < 2:
        raise DatasetError(
            f"Dataset is too small to hold records out for evaluation: it has {len(records)} "
            f"record{'' if len(records) == 1 else 's'}; at least 2 are needed."
        )
    count = min(len(records) - 1, max(1, round(len(records) * fraction)))
    held = set(random.Random(seed).sample(range(len(records)), count))
    train = [record for i, record in enumerate(records) if i not in held]
    return train, [record for i, record in enumerate(records) if i in held]
