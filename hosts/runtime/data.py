"""Training data addressed by global sample index.

Every sample is a function of its global index alone, so any rank can build any slice and a
resume on another mix (other world size, other micro-batches) continues from the recorded
number of samples consumed without repeating or skipping one. Nothing is downloaded.

A dataset file is read as records (kernel.datasets.files: text, {"text"}, chat, prompt/completion),
each tokenized with the model's own tokenizer into ids and a loss mask (assistant and completion
tokens only: kernel.datasets.tokens), and packed into windows (hosts.runtime.records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from kernel.datasets.validation import local_path
from kernel.modelspecs import ModelSpec

SYNTHETIC = "synthetic"


class Corpus(Protocol):
    """Blocks of seq_len + 1 token ids with their loss masks, addressed by global sample index."""

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids int64, mask bool), both (count, seq_len + 1); mask[i, t]: id t of row i is a training target."""
        ...

    def loss_tokens(self, start: int, count: int) -> int:
        """How many targets samples [start, start + count) train on: the loss's denominator."""
        ...


def shard(samples_seen: int, micro_batches: list[int], rank: int) -> tuple[int, int]:
    """(first global index, count) of `rank`'s slice of the next step's global batch.

    The step consumes [samples_seen, samples_seen + sum(micro_batches)), ranks in order.
    """
    return samples_seen + sum(micro_batches[:rank]), micro_batches[rank]


@dataclass(frozen=True)
class TrainingData:
    """The training corpus and, when the job asked for one, the examples its eval loss is measured on."""

    corpus: Corpus
    eval_examples: list[tuple[list[int], list[bool]]] | None


def open_data(
    dataset: str,
    spec: ModelSpec,
    seed: int,
    *,
    tokenizer_path: str | None = None,
    eval_dataset: str | None = None,
    eval_fraction: float = 0.0,
    train_on_inputs: bool = False,
) -> TrainingData:
    """The synthetic corpus, or a dataset file in the model's own tokens (byte-level for catalog models).

    The eval set is `eval_dataset`, or a deterministic held-out `eval_fraction` of the dataset's records
    (which training then never sees). `train_on_inputs`: a chat's or prompt's every token is a training
    target, not only the answer's (the eval set still scores the answers alone).
    """
    from hosts.runtime import records
    from kernel.datasets import files as record_files
    from kernel.datasets import tokens

    tokenizer = tokens.load_tokenizer(tokenizer_path, spec.vocab_size)
    held_out = None
    if dataset == SYNTHETIC:
        corpus = SyntheticCorpus(spec.vocab_size, spec.seq_len, seed)
        if eval_dataset == SYNTHETIC or (eval_fraction and not eval_dataset):
            held_out = [_as_example(corpus.batch(EVAL_SYNTHETIC_FROM + i, 1)) for i in range(EVAL_SYNTHETIC_SAMPLES)]
    else:
        kind, rows = record_files.read_records(local_path(dataset))
        if eval_fraction and not eval_dataset:
            rows, eval_rows = records.split_holdout(rows, eval_fraction, seed)
            held_out = _examples(eval_rows, kind, tokenizer, spec.seq_len)
        encoded = (tokens.encode_record(r, kind, tokenizer) for r in rows)
        if train_on_inputs:
            encoded = ((ids, [True] * len(ids)) for ids, _ in encoded)
        corpus = TokenCorpus(*records.pack(encoded, spec.seq_len), seed)
    if eval_dataset and eval_dataset != SYNTHETIC:
        eval_kind, eval_rows = record_files.read_records(local_path(eval_dataset))
        held_out = _examples(eval_rows, eval_kind, tokenizer, spec.seq_len)
    return TrainingData(corpus, held_out)


def open_corpus(dataset: str, spec: ModelSpec, seed: int) -> Corpus:
    """The training corpus alone (tests and benchmarks)."""
    return open_data(dataset, spec, seed).corpus


# Synthetic eval samples: walks of the same chain from indices training never reaches.
EVAL_SYNTHETIC_SAMPLES, EVAL_SYNTHETIC_FROM = 16, 1 << 40


def _examples(rows: list[dict], kind: str, tokenizer, seq_len: int) -> list[tuple[list[int], list[bool]]]:
    """Eval records, each tokenized on its own (hosts.runtime.records.eval_examples)."""
    from hosts.runtime import records
    from kernel.datasets import tokens

    return records.eval_examples([tokens.encode_record(r, kind, tokenizer) for r in rows], seq_len)


def _as_example(block: tuple[torch.Tensor, torch.Tensor]) -> tuple[list[int], list[bool]]:
    ids, mask = block
    return ids[0].tolist(), mask[0].tolist()


class TokenCorpus:
    """A packed dataset: windows of seq_len + 1 ids with masks, shuffled once per epoch.

    Global index i is window perm_e[i mod n] of epoch e = i // n, perm_e seeded by (seed, e), so any
    rank can build any slice and a resume on another mix continues exactly where training stood.
    """

    def __init__(self, ids: np.ndarray, mask: np.ndarray, seed: int) -> None:
        self.ids, self.mask, self.seed = torch.from_numpy(ids), torch.from_numpy(mask), seed
        self.windows = self.ids.shape[0]
        self.targets = self.mask[:, 1:].sum(1).tolist()
        self._perm_epoch, self._perm = -1, torch.arange(self.windows)

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self._window_index(i) for i in range(start, start + count)]
        return self.ids[rows], self.mask[rows]

    def loss_tokens(self, start: int, count: int) -> int:
        return sum(self.targets[self._window_index(i)] for i in range(start, start + count))

    def _window_index(self, index: int) -> int:
        epoch, offset = divmod(index, self.windows)
        if epoch != self._perm_epoch:
            self._perm = torch.randperm(self.windows, generator=_sample_generator(self.seed, -1 - epoch))
            self._perm_epoch = epoch
        return int(self._perm[offset])


def _sample_generator(seed: int, index: int) -> torch.Generator:
    """An RNG that depends only on (seed, global index)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + index) % (1 << 63))


class SyntheticCorpus:
    """Walks on a fixed sparse Markov chain over the vocabulary.

    Each token has a few successors with uneven probabilities, so the next-token entropy is
    about one nat against ln(vocab) for an untrained model: llama-tiny's loss falls from ~6.2
    to below 4 within 50 steps, which makes "is it learning" visible in a smoke test.
    The chain is a table `next[token, bin]` over `resolution` equally likely bins, so a step
    of a walk is one lookup (a simulated rank's real CPU time goes to the model, not to data).
    """

    def __init__(self, vocab: int, seq_len: int, seed: int, successors: int = 4, resolution: int = 64) -> None:
        chain = np.random.default_rng([seed, 0])
        targets = chain.integers(vocab, size=(vocab, successors))
        weights = chain.random((vocab, successors)) ** 2 + 0.05
        cumulative = (weights / weights.sum(1, keepdims=True)).cumsum(1)
        centres = (np.arange(resolution) + 0.5) / resolution
        choice = np.minimum((centres[None, :, None] > cumulative[:, None, :]).sum(-1), successors - 1)
        self.next = np.take_along_axis(targets, choice, axis=1)
        self.vocab, self.length, self.resolution, self.seed = vocab, seq_len + 1, resolution, seed

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = np.empty((count, self.length), dtype=np.int64)
        bins = np.empty((count, self.length - 1), dtype=np.int64)
        for row, index in enumerate(range(start, start + count)):
            rng = np.random.default_rng([self.seed, 1, index])  # depends on the global index only
            tokens[row, 0] = rng.integers(self.vocab)
            bins[row] = rng.integers(self.resolution, size=self.length - 1)
        for t in range(1, self.length):
            tokens[:, t] = self.next[tokens[:, t - 1], bins[:, t - 1]]
        return torch.from_numpy(tokens), torch.ones(tokens.shape, dtype=torch.bool)

    def loss_tokens(self, start: int, count: int) -> int:
        return count * (self.length - 1)
