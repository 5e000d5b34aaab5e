"""Uploaded datasets are checked on upload; all data is addressed by global sample index.

Each kind's line-by-line rules are in test_records.py; these are the upload's file-level checks."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest
import torch

from hosts.runtime.data import SyntheticCorpus, open_corpus, open_data, shard
from kernel.datasets.validation import DatasetError, validate_dataset_file
from kernel.modelspecs import resolve_model

LIMIT = 1 << 20


def write(tmp_path, name: str, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_a_text_file_is_accepted_with_a_record_per_non_blank_line(tmp_path):
    path = write(tmp_path, "corpus.txt", "first line\n\nsecond line é\nthird\n".encode())
    assert validate_dataset_file(path, LIMIT) == ("text", 3)


def test_a_jsonl_file_is_accepted_with_its_records(tmp_path):
    lines = [json.dumps({"text": "hello"}), "", json.dumps({"text": "world", "id": 2})]
    path = write(tmp_path, "data.jsonl", "\n".join(lines).encode())
    assert validate_dataset_file(path, LIMIT) == ("jsonl", 2)


def test_jsonl_is_recognised_without_its_extension(tmp_path):
    path = write(tmp_path, "upload.bin", b'{"text": "a"}\n{"text": "b"}\n')
    assert validate_dataset_file(path, LIMIT) == ("jsonl", 2)


def test_chat_and_completion_files_are_accepted(tmp_path):
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = write(tmp_path, "chat.jsonl", json.dumps(chat).encode())
    assert validate_dataset_file(path, LIMIT) == ("chat", 1)
    path = write(tmp_path, "pairs.jsonl", b'{"prompt": "2+2=", "completion": "4"}\n')
    assert validate_dataset_file(path, LIMIT) == ("completion", 1)


@pytest.mark.parametrize("content", [b"", b"  \n\n\t\n"])
def test_an_empty_file_is_refused(tmp_path, content):
    with pytest.raises(DatasetError, match="empty"):
        validate_dataset_file(write(tmp_path, "empty.txt", content), LIMIT)


def test_a_binary_file_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="binary.*offset 4"):
        validate_dataset_file(write(tmp_path, "model.txt", b"PK\x03\x04\x00\x00data"), LIMIT)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="not UTF-8.*offset 3"):
        validate_dataset_file(write(tmp_path, "latin1.txt", "caf\u00e9 na\u00efve".encode("latin-1")), LIMIT)


def test_a_malformed_jsonl_line_is_refused_by_number(tmp_path):
    content = b'{"text": "ok"}\n\n{"text": "broken"\n'
    with pytest.raises(DatasetError, match="Line 3: not valid JSON"):
        validate_dataset_file(write(tmp_path, "bad.jsonl", content), LIMIT)


def test_a_jsonl_record_without_text_is_refused_by_number(tmp_path):
    content = b'{"text": "ok"}\n{"body": "no text field"}\n'
    with pytest.raises(DatasetError, match='Line 2: a record needs a "text" field'):
        validate_dataset_file(write(tmp_path, "bad.jsonl", content), LIMIT)


def test_a_file_over_the_limit_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="too large: 2.0 MiB; the limit is 1.0 MiB"):
        validate_dataset_file(write(tmp_path, "big.txt", b"a" * (2 * LIMIT)), LIMIT)


def test_an_upload_is_checked_holding_one_record_at_a_time(tmp_path):
    """A 4 MiB file of short chat records is checked within 1 MiB of Python allocations (it took the whole
    file several times over: bytes, text, lines, records)."""
    chat = {"messages": [{"role": "user", "content": "the chip runs"}, {"role": "assistant", "content": "fast"}]}
    line = json.dumps(chat).encode() + b"\n"
    path = write(tmp_path, "chat.jsonl", line * (4 * LIMIT // len(line)))
    tracemalloc.start()
    try:
        kind, count = validate_dataset_file(path, 8 * LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (kind, count) == ("chat", 4 * LIMIT // len(line))
    assert peak < LIMIT, f"{peak:,} bytes at the peak"


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        validate_dataset_file(tmp_path / "nope.txt", LIMIT)


def test_validation_does_not_import_torch():
    code = "import sys; import kernel.datasets.validation; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_synthetic_samples_depend_only_on_their_global_index():
    corpus = SyntheticCorpus(vocab=512, seq_len=16, seed=7)
    whole, mask = corpus.batch(0, 8)
    assert mask.all()
    assert torch.equal(corpus.batch(3, 5)[0], whole[3:])
    assert torch.equal(SyntheticCorpus(512, 16, 7).batch(5, 1)[0], whole[5:6])
    assert not torch.equal(SyntheticCorpus(512, 16, 8).batch(0, 8)[0], whole)
    assert int(whole.max()) < 512 and int(whole.min()) >= 0


def test_open_corpus_reads_an_uploaded_file(tmp_path):
    path = write(tmp_path, "corpus.txt", b"hello world\n" * 20)
    ids, mask = open_corpus(str(path), resolve_model("llama-tiny"), seed=1).batch(0, 2)
    assert ids.shape == mask.shape == (2, 65)


def test_ranks_take_consecutive_slices_of_each_global_batch():
    micro_batches = [1, 2, 5]
    slices = [shard(16, micro_batches, rank) for rank in range(3)]
    assert slices == [(16, 1), (17, 2), (19, 5)]
    # After a resume on another mix the next step starts where the last one ended.
    assert shard(16 + 8, [3, 5], 0) == (24, 3)


def test_train_on_inputs_makes_every_prompt_token_a_target(tmp_path):
    path = tmp_path / "pairs.completion.jsonl"
    rows = [{"prompt": f"question {i}: what comes next? ", "completion": f"answer {i}"} for i in range(20)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = resolve_model("llama-tiny")
    answers_only = open_data(str(path), spec, seed=1).corpus
    everything = open_data(str(path), spec, seed=1, train_on_inputs=True).corpus
    windows = len(answers_only.targets)
    trained, all_tokens = answers_only.loss_tokens(0, windows), everything.loss_tokens(0, windows)
    # Bytes of the answers and their end-of-sequence tokens, against every byte but the stream's very first.
    assert trained == sum(len(row["completion"]) + 1 for row in rows)
    assert all_tokens == sum(len(row["prompt"]) + len(row["completion"]) + 1 for row in rows) - 1
