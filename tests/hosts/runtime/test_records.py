"""Dataset records in the model's own tokens: every kind parsed, validated line by line, encoded with
the right loss mask (tiny BPE tokenizer with a chat template, and byte-level), packed and held out."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from hosts.runtime.records import eval_examples, pack, split_holdout
from kernel.datasets.files import DatasetError, first_records, read_records
from kernel.datasets.tokens import ByteTokenizer, encode_record, load_tokenizer
from tests.support.hfmodels import chat_records, make_tokenizer

VOCAB = 300
END = "<|end|>\n"  # the tiny chat template's end of turn
CHAT = {
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "the chip runs"},
        {"role": "assistant", "content": "runs chip the"},
        {"role": "user", "content": "data fast"},
        {"role": "assistant", "content": "fast  data"},
    ]
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizer")
    make_tokenizer(directory, vocab_size=VOCAB)
    return directory


@pytest.fixture(scope="module")
def bpe(model_dir):
    return load_tokenizer(model_dir, VOCAB)


@pytest.fixture(scope="module")
def bpe_without_template(model_dir):
    tokenizer = load_tokenizer(model_dir, VOCAB)
    tokenizer.chat_template = None
    return tokenizer


byte_level = ByteTokenizer(512)


def write_lines(tmp_path, name: str, lines: list) -> str:
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def trained_text(tokenizer, encoded) -> str:
    ids, mask = encoded
    return tokenizer.decode([token for token, trained in zip(ids, mask, strict=True) if trained])


def context_text(tokenizer, encoded) -> str:
    ids, mask = encoded
    return tokenizer.decode([token for token, trained in zip(ids, mask, strict=True) if not trained])


# Reading


def test_a_text_file_has_one_record_per_non_blank_line(tmp_path):
    path = tmp_path / "poems.txt"
    path.write_text("roses are red\n\n  \nviolets é\r\n")
    assert read_records(path) == ("text", [{"text": "roses are red"}, {"text": "violets é"}])


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"text": "hello", "id": 1}, "jsonl"),
        (CHAT, "chat"),
        ({"prompt": "2+2=", "completion": "4"}, "completion"),
    ],
)
def test_the_kind_comes_from_the_first_records_keys(tmp_path, record, kind):
    path = write_lines(tmp_path, "upload.bin", [record, "", record])
    assert read_records(path) == (kind, [record, record])


def test_a_forced_kind_is_checked_on_every_line(tmp_path):
    path = write_lines(tmp_path, "data.jsonl", [{"text": "a"}])
    with pytest.raises(DatasetError, match=r'Line 1: a \{"text"\} record where \{"messages"\} records were asked for'):
        read_records(path, kind="chat")
    assert read_records(path, kind="text") == ("text", [{"text": '{"text": "a"}'}])


@pytest.mark.parametrize(
    ("first", "bad_line", "message"),
    [
        (CHAT, '{"text": "broken"', r"Line 3: not valid JSON: Expecting ',' delimiter \(column 18\)"),
        (CHAT, "[1, 2]", "Line 3: must be a JSON object, not a list"),
        (CHAT, {"body": "x"}, 'Line 3: a record needs a "text" field, a "messages" list, or "prompt" and "completion"'),
        ({"text": "ok"}, {"text": 7}, 'Line 3: "text" must be a string, not a number'),
        (CHAT, {"messages": "hi"}, r'Line 3: "messages" must be a list of \{"role", "content"\} objects, not a string'),
        (CHAT, {"messages": []}, 'Line 3: "messages" is empty'),
        (CHAT, {"messages": [{"role": "user"}]}, r"Line 3: .* objects \(message 1 is not\)"),
        (CHAT, {"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]}, 'message 2 .*"bot"'),
        (CHAT, {"messages": [{"role": "user", "content": "q"}]}, 'Line 3: no "assistant" message'),
        (CHAT, {"text": "a"}, r'Line 3: a \{"text"\} record in a dataset of \{"messages"\} records .*mixed kinds'),
        (CHAT, '{"text": "a", "x": ' + "[" * 5000 + "]" * 5000 + "}", "Line 3: nested deeper than 32 levels"),
        (CHAT, '{"text": "a", "x": ' + "[" * 40 + "]" * 40 + "}", "Line 3: nested deeper than 32 levels"),
        ({"text": "ok"}, '{"text": "a \\udc00 b"}', r"Line 3: \\udc00 is half of a UTF-16 surrogate pair"),
        (CHAT, '{"messages": [{"role": "user", "content": "\\uD800"}]}', r"Line 3: \\uD800 is half of a UTF-16"),
    ],
)
def test_a_bad_line_is_named_by_its_number(tmp_path, first, bad_line, message):
    path = write_lines(tmp_path, "data.jsonl", [first, "", bad_line, first])
    with pytest.raises(DatasetError, match=message):
        read_records(path)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ({"prompt": "q"}, 'Line 2: missing "completion"'),
        ({"prompt": ["q"], "completion": "a"}, 'Line 2: "prompt" must be a string, not a list'),
        (
            {"text": "a"},
            r'Line 2: a \{"text"\} record in a dataset of \{"prompt", "completion"\} records .*mixed kinds',
        ),
    ],
)
def test_a_bad_completion_line_is_named_by_its_number(tmp_path, bad_line, message):
    path = write_lines(tmp_path, "pairs.jsonl", [{"prompt": "q", "completion": "a"}, bad_line])
    with pytest.raises(DatasetError, match=message):
        read_records(path)


def test_a_character_escaped_as_a_surrogate_pair_is_read_as_that_character(tmp_path):
    path = write_lines(tmp_path, "data.jsonl", ['{"text": "\\ud83d\\ude00 [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}'])
    assert read_records(path) == ("jsonl", [{"text": "😀 " + "[" * 36}])


def test_a_dataset_with_nothing_to_train_on_is_refused(tmp_path):
    path = write_lines(tmp_path, "pairs.jsonl", [{"prompt": "q", "completion": " "}, {"prompt": "r", "completion": ""}])
    with pytest.raises(DatasetError, match='nothing to train on: every record\'s "completion" is empty'):
        read_records(path)


def test_a_preview_reads_only_the_first_records(tmp_path):
    path = write_lines(tmp_path, "data.jsonl", [{"text": "a"}, "", {"text": "b"}, "this line is never parsed"])
    assert first_records(path, "jsonl", 2) == [{"text": "a"}, {"text": "b"}]
    assert first_records(path, "text", 1) == [{"text": '{"text": "a"}'}]


# Tokenizers


def test_catalog_models_get_the_byte_tokenizer():
    tokenizer = load_tokenizer(None, 512)
    assert isinstance(tokenizer, ByteTokenizer) and tokenizer.eos_token_id == 511
    assert tokenizer.encode("aé") == [97, 0xC3, 0xA9]
    assert tokenizer.decode([104, 105, 0xC3, 511]) == "hi\\xc3<eos>"


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(model_dir):
    with pytest.raises(DatasetError, match="tokenizer has 300 tokens but its vocabulary only 256"):
        load_tokenizer(model_dir, 256)


def test_a_folder_without_a_tokenizer_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="Can't load the tokenizer"):
        load_tokenizer(tmp_path, 512)


# Encoding


@pytest.mark.parametrize("tokenizer_name", ["bpe", "byte_level"])
def test_a_text_record_is_trained_on_whole_and_closed_by_eos(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name) if tokenizer_name == "bpe" else byte_level
    ids, mask = encode_record({"text": "the chip runs é"}, "jsonl", tokenizer)
    assert ids[-1] == tokenizer.eos_token_id
    assert all(mask)
    assert tokenizer.decode(ids[:-1]) == "the chip runs é"


@pytest.mark.parametrize("tokenizer_name", ["bpe", "byte_level"])
def test_a_completion_is_trained_on_and_its_prompt_is_context(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name) if tokenizer_name == "bpe" else byte_level
    encoded = encode_record({"prompt": "the chip", "completion": " runs fast"}, "completion", tokenizer)
    eos = tokenizer.decode([tokenizer.eos_token_id])
    assert trained_text(tokenizer, encoded) == " runs fast" + eos
    assert context_text(tokenizer, encoded) == "the chip"


def test_chat_trains_on_exactly_the_assistant_messages_and_their_end_markers(bpe):
    encoded = encode_record(CHAT, "chat", bpe)
    assert trained_text(bpe, encoded) == "runs chip the" + END + "fast  data" + END
    assert bpe.decode(encoded[0]) == bpe.apply_chat_template(CHAT["messages"], tokenize=False)


def test_chat_records_from_the_test_models_mask_their_answers(bpe):
    for record in chat_records(5, seed=3):
        answer = record["messages"][1]["content"]
        assert trained_text(bpe, encode_record(record, "chat", bpe)) == answer + END


@pytest.mark.parametrize("tokenizer_name", ["bpe_without_template", "byte_level"])
def test_without_a_chat_template_chats_use_the_plain_layout(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name) if tokenizer_name != "byte_level" else byte_level
    encoded = encode_record(CHAT, "chat", tokenizer)
    eos = tokenizer.decode([tokenizer.eos_token_id])
    assert tokenizer.decode(encoded[0]) == (
        "system: Answer briefly.\nuser: the chip runs\nassistant: runs chip the\nuser: data fast\n"
        "assistant: fast  data\n" + eos
    )
    # A token may carry the space between "assistant:" and the answer: predicting it is the answer's job.
    assert trained_text(tokenizer, encoded).split() == ["runs", "chip", "the", "fast", "data", eos]


def test_byte_level_chats_train_on_exactly_the_answers_their_newlines_and_the_closing_eos():
    assert trained_text(byte_level, encode_record(CHAT, "chat", byte_level)) == "runs chip the\nfast  data\n<eos>"
    ends_with_user = {"messages": [*CHAT["messages"], {"role": "user", "content": "thanks"}]}
    ids, mask = encode_record(ends_with_user, "chat", byte_level)
    assert ids[-1] == byte_level.eos_token_id and not mask[-1]


def test_a_chat_template_that_is_not_prefix_stable_is_refused(model_dir):
    tokenizer = load_tokenizer(model_dir, VOCAB)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    with pytest.raises(DatasetError, match="not prefix-stable"):
        encode_record(CHAT, "chat", tokenizer)


def test_a_chat_opening_with_the_assistant_needs_a_message_before_it_under_a_template(bpe):
    record = {"messages": [{"role": "assistant", "content": "hello"}]}
    with pytest.raises(DatasetError, match="opens with an assistant message"):
        encode_record(record, "chat", bpe)
    assert trained_text(byte_level, encode_record(record, "chat", byte_level)) == "hello\n<eos>"


# Packing, evaluation, held-out split


def test_records_are_packed_in_order_into_windows_overlapping_by_one():
    encoded = [([1, 2, 3, 4, 5], [True, False, True, True, True]), ([6, 7, 8], [False, True, True])]
    ids, mask = pack(encoded, seq_len=3)
    assert ids.dtype == np.int64 and mask.dtype == bool and ids.shape == mask.shape == (3, 4)
    assert ids.tolist() == [[1, 2, 3, 4], [4, 5, 6, 7], [7, 8, 0, 0]]
    assert mask.tolist() == [[True, False, True, True], [True, True, False, True], [True, True, False, False]]


def test_a_stream_shorter_than_a_window_is_repeated_to_fill_it():
    ids, mask = pack([([1, 2, 3], [False, True, True])], seq_len=7)
    assert ids.tolist() == [[1, 2, 3, 1, 2, 3, 1, 2]]
    assert mask.tolist() == [[False, True, True, False, True, True, False, True]]


def test_packing_records_with_no_target_is_refused():
    with pytest.raises(DatasetError, match="no token to train on"):
        pack([([1, 2], [False, False])], seq_len=4)


def test_eval_examples_are_single_records_cut_to_a_window():
    encoded = [([1, 2, 3, 4, 5, 6], [False, True] * 3), ([7, 8], [True, False]), ([9, 10, 11], [False, False, True])]
    assert eval_examples(encoded, seq_len=2) == [([1, 2, 3], [False, True, False]), ([9, 10, 11], [False, False, True])]
    with pytest.raises(DatasetError, match="No evaluation record has a token to score"):
        eval_examples([([7, 8], [True, False])], seq_len=2)


def test_the_held_out_split_is_deterministic_and_keeps_the_file_order():
    records = [{"text": str(i)} for i in range(20)]
    train, held = split_holdout(records, 0.25, seed=7)
    assert (len(train), len(held)) == (15, 5)
    assert sorted(train + held, key=lambda r: int(r["text"])) == records
    assert held == sorted(held, key=lambda r: int(r["text"]))
    assert split_holdout(records, 0.25, seed=7) == (train, held)
    assert split_holdout(records, 0.25, seed=8) != (train, held)


def test_the_held_out_split_keeps_a_record_on_each_side():
    records = [{"text": "a"}, {"text": "b"}]
    assert [len(side) for side in split_holdout(records, 0.01, seed=1)] == [1, 1]
    assert [len(side) for side in split_holdout(records, 0.99, seed=1)] == [1, 1]
    with pytest.raises(DatasetError, match="too small to hold records out.*1 record; at least 2"):
        split_holdout(records[:1], 0.5, seed=1)
    with pytest.raises(DatasetError, match="between 0 and 1, not 1.5"):
        split_holdout(records, 1.5, seed=1)


def test_records_import_neither_torch_nor_transformers():
    code = (
        "import sys; import hosts.runtime.records, kernel.datasets.tokens, kernel.datasets.validation; "
        "assert not {'torch', 'transformers'} & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
