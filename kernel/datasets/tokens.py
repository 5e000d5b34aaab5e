"""Dataset records in the model's own tokens: tokenizers, and each record's token ids with its loss mask.

Each record becomes token ids and a loss mask (True: a token the model is trained to predict): every
token of a text, the completion of a prompt, the assistant turns of a chat. The platform validates
uploads and previews tokenization with this module, so it imports no torch, and transformers only
inside the functions that load or use a model's tokenizer. Reading the records is
kernel.datasets.files; packing them into windows, hosts.runtime.records.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from kernel.datasets.files import CHAT, COMPLETION, JSONL, KINDS, TEXT, DatasetError

Encoded = tuple[list[int], list[bool]]
Span = tuple[int, int]


# Tokenizers


class ByteTokenizer:
    """The catalog models' tokenizer (they are trained from scratch without one): UTF-8 bytes as ids.

    Ids are the bytes modulo the vocabulary, and the end of a sequence is the last id, vocab_size - 1
    (255 is never a UTF-8 byte, and larger vocabularies leave it unused). No chat template: chats get
    the plain "role: content" layout.
    """

    chat_template = None
    bos_token_id = None

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 2:
            raise DatasetError(f"A byte-level vocabulary needs at least 2 ids, not {vocab_size}.")
        self.vocab_size = vocab_size
        self.eos_token_id = vocab_size - 1

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        return (self._bytes(text) % self.vocab_size).tolist()

    def encode_with_offsets(self, text: str) -> tuple[list[int], np.ndarray]:
        """Ids and, for each, the [start, end) of the character of `text` it comes from (a character
        takes up to 4 bytes: each byte but a continuation byte starts the next character)."""
        data = self._bytes(text)
        chars = np.cumsum((data & 0xC0) != 0x80) - 1
        return (data % self.vocab_size).tolist(), np.stack([chars, chars + 1], axis=1)

    @staticmethod
    def _bytes(text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the ids: bytes that aren't UTF-8 shown as \\xNN, the end of a sequence as <eos>."""
        out, pending = io.StringIO(), bytearray()
        for token in ids:
            if token != self.eos_token_id and token < 256:
                pending.append(token)
                continue
            out.write(pending.decode("utf-8", errors="backslashreplace"))
            pending.clear()
            out.write("<eos>" if token == self.eos_token_id else f"<{token}>")
        out.write(pending.decode("utf-8", errors="backslashreplace"))
        return out.getvalue()


# A folder holding one of these has a tokenizer of its own (export.py copies them with the weights).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _bytes_model(folder: Path) -> bool:
    """A model folder (config.json) that came without a tokenizer: a catalog model's, which reads bytes."""
    return (folder / "config.json").is_file() and not any((folder / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(path: str | os.PathLike | None, vocab_size: int):
    """The tokenizer of the model directory at `path` (local files only), or for a catalog model
    (`path` None, or a model folder without tokenizer files: a catalog model's trained weights, `job:<id>`)
    a ByteTokenizer; refused when its ids wouldn't fit the model's vocabulary."""
    if path is None or _bytes_model(Path(path)):
        return ByteTokenizer(vocab_size)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"Can't load the tokenizer of the model in '{path}': {exc}") from None
    if len(tokenizer) > vocab_size:
        raise DatasetError(
            f"The model's tokenizer has {len(tokenizer):,} tokens but its vocabulary only {vocab_size:,} embeddings."
        )
    return tokenizer


# Encoding: ids and loss masks


Renderer = Callable[[list[dict], bool], str]  # (messages, add_generation_prompt) -> the chat as text


def encode_record(record: dict, kind: str, tokenizer, render: Renderer | None = None) -> Encoded:
    """A record's token ids and loss mask (True: the token is a training target).

    text/jsonl: every token, closed by the end-of-sequence token so packed documents stay apart.
    completion: the prompt is context; the completion and a closing end-of-sequence are trained.
    chat: rendered with the tokenizer's chat template; the assistant messages and their end-of-turn
    markers are trained. Without a template (byte-level) a chat is laid out as "role: content" lines
    and closed by an end-of-sequence, trained when the chat ends with an assistant turn. `render`
    renders the template instead of the tokenizer (the web's previews: bounded, in a child process).
    """
    if kind in (TEXT, JSONL):
        ids, mask = _encode_spans(tokenizer, record["text"], [(0, len(record["text"]))], add_special_tokens=True)
        return _close(ids, mask, tokenizer, trained=True)
    if kind == COMPLETION:
        text = record["prompt"] + record["completion"]
        ids, mask = _encode_spans(tokenizer, text, [(len(record["prompt"]), len(text))], add_special_tokens=True)
        return _close(ids, mask, tokenizer, trained=True)
    if kind == CHAT:
        return _encode_chat(record["messages"], tokenizer, render)
    raise DatasetError(f"Unknown dataset kind '{kind}': use one of {', '.join(KINDS)}.")


def chat_prefixes(messages: list[dict]) -> list[tuple[int, bool]]:
    """The renders encoding a chat takes, as (first n messages, add_generation_prompt): the whole chat, and
    before and through each assistant message."""
    wanted = [(len(messages), False)]
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            wanted += [(i, True), (i + 1, False)]
    return wanted


def _encode_chat(messages: list[dict], tokenizer, render: Renderer | None = None) -> Encoded:
    """Assistant spans found by rendering prefixes (chat_prefixes): the conversation up to message i with a
    generation prompt ends where message i's content starts; up to and including message i, where its turn ends."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        render = _plain_layout
    render = render or _template_renderer(tokenizer)
    if template and messages[0]["role"] == "assistant":
        raise DatasetError(
            "The conversation opens with an assistant message; the chat template needs a system or user "
            "message before it."
        )
    whole = render(messages, False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, through = render(messages[:i], True), render(messages[: i + 1], False)
        if not (through.startswith(before) and whole.startswith(through)):
            raise DatasetError(
                f"The chat template is not prefix-stable: the conversation rendered up to message {i + 1} is "
                "not the start of the whole conversation rendered, so its assistant tokens can't be found."
            )
        spans.append((len(before), len(through)))
    ids, mask = _encode_spans(tokenizer, whole, spans, add_special_tokens=False)
    if template:
        return ids, mask
    return _close(ids, mask, tokenizer, trained=messages[-1]["role"] == "assistant")


def _template_renderer(tokenizer) -> Callable[[list[dict], bool], str]:
    from jinja2 import TemplateError

    def render(messages: list[dict], add_generation_prompt: bool) -> str:
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        except (TemplateError, ValueError, TypeError) as exc:
            raise DatasetError(f"The model's chat template refused the conversation: {exc}") from None

    return render


def _plain_layout(messages: list[dict], add_generation_prompt: bool) -> str:
    """The plain layout, one "role: content" line per message, for tokenizers without a chat template."""
    lines = "".join(f"{message['role']}: {message['content']}\n" for message in messages)
    return lines + ("assistant: " if add_generation_prompt else "")


def _encode_spans(tokenizer, text: str, spans: list[Span], *, add_special_tokens: bool) -> Encoded:
    """`text` tokenized whole; a token is trained when the characters it comes from overlap a span
    (tokens the tokenizer adds itself, like a beginning-of-sequence, never are)."""
    if isinstance(tokenizer, ByteTokenizer):
        ids, offsets = tokenizer.encode_with_offsets(text)
        added = [False] * len(ids)
    else:
        try:
            encoding = tokenizer(
                text,
                add_special_tokens=add_special_tokens,
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
            )
        except NotImplementedError:
            raise DatasetError(
                "The model's tokenizer can't map tokens to characters (it is not a fast tokenizer), "
                "so its loss mask can't be built."
            ) from None
        ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
        added = [bool(flag) for flag in encoding["special_tokens_mask"]]
    return list(ids), _in_spans(offsets, spans, added)


def _in_spans(offsets: list[Span] | np.ndarray, spans: list[Span], added: list[bool]) -> list[bool]:
    """Whether each token's characters [start, end) meet a span (an empty range counts as its start),
    for tokens the tokenizer didn't add itself."""
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], np.maximum(bounds[:, 1], bounds[:, 0] + 1)
    inside = np.zeros(len(bounds), dtype=bool)
    for span_start, span_end in spans:
        inside |= (starts < span_end) & (ends > span_start)
    return (inside & ~np.asarray(added, dtype=bool)).tolist()


def _close(ids: list[int], mask: list[bool], tokenizer, *, trained: bool) -> Encoded:
    """End the record with the end-of-sequence token (added unless the tokenizer already did)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        return ids, mask
    if not ids or ids[-1] != eos:
        ids, mask = [*ids, eos], [*mask, trained]
    else:
        mask = [*mask[:-1], trained]
    return ids, mask
