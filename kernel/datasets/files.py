"""Dataset files read and checked line by line, one record in memory at a time.

A dataset file is UTF-8 with one record per non-blank line, of one kind:
- "text": plain text; every non-blank line is a record {"text": line}.
- "jsonl": {"text": str}.
- "chat": {"messages": [{"role": "system" | "user" | "assistant", "content": str}, ...]}, with at
  least one assistant message.
- "completion": {"prompt": str, "completion": str}.

The platform checks an upload with `count_records`, which keeps nothing but counters: a 50 MiB file
costs the web worker its longest line, not every record at once (it once cost 1.3 GiB). The runtime
reads every record with `read_records`, the preview the first few with `first_records`. A line is
refused, by its number, for what would break a reader later: bad JSON, JSON nested deeper than a
record can be (5,000 brackets exhaust Python's decoder), or a lone surrogate escape ("\\ud800"),
which is no character and can't be encoded for a tokenizer. Plain Python: the platform imports it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kernel.words import Words

TEXT, JSONL, CHAT, COMPLETION = "text", "jsonl", "chat", "completion"
KINDS = (TEXT, JSONL, CHAT, COMPLETION)
ROLES = ("system", "user", "assistant")
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
TEXT_SUFFIXES = {".txt", ".text", ".md"}
DEFAULT_MAX_BYTES = 1 << 30
# A chat record is three levels deep; the API refuses JSON past 32 levels, and so does a dataset line.
MAX_RECORD_DEPTH = 32
# How JSON spells a UTF-16 surrogate; only a line holding one needs its strings checked.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


# How each kind of record looks, for error messages.
SHAPES = {
    TEXT: Words("plain text"),
    JSONL: '{"text"}',
    CHAT: '{"messages"}',
    COMPLETION: '{"prompt", "completion"}',
}
MESSAGES_SHAPE = 'Line %(line)s: "messages" must be a list of {"role", "content"} objects'

Numbered = tuple[int, str]


class DatasetError(ValueError):
    """A dataset the runtime cannot train on; the message says why in the user's terms.

    Made with `of(template, **values)`, it keeps its English template and values beside the message, so
    the platform can say it in the reader's language (workers.services.datasets.dataset_message); the
    kernel itself has no translations.
    """

    def __init__(self, message: str, template: str = "", values: dict | None = None):
        super().__init__(message)
        self.template, self.values = template, dict(values or {})

    @classmethod
    def of(cls, template: str, **values) -> DatasetError:
        return cls(template % values, template, values)


def read_records(
    path: str | os.PathLike, kind: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str, list[dict]]:
    """Every record of a dataset file and its kind, each line validated.

    The kind is `kind` when given, else plain text for .txt/.text/.md names, else (JSON lines) the
    kind of the first record's keys. The first bad line raises DatasetError naming its number.
    """
    kind, records = open_records(path, kind, max_bytes)
    kept = list(records)
    _check_something_to_train_on(kind, any(_has_target(kind, record) for record in kept))
    return kind, kept


def count_records(
    path: str | os.PathLike, kind: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str, int]:
    """(kind, number of records) after the checks of read_records, holding one record at a time."""
    kind, records = open_records(path, kind, max_bytes)
    count, trained = 0, False
    for record in records:
        count += 1
        trained = trained or _has_target(kind, record)
    _check_something_to_train_on(kind, trained)
    return kind, count


def open_records(path: str | os.PathLike, kind: str | None, max_bytes: int) -> tuple[str, Iterator[dict]]:
    """The file's kind (from its first record) and its records, checked as they are read."""
    path = Path(path)
    _check_size(path, max_bytes)
    lines = _checked_lines(path)
    first = next(lines, None)
    if first is None:
        raise DatasetError.of("Dataset is empty.")
    lines = itertools.chain([first], lines)
    if _check_kind(kind) == TEXT or (kind is None and not _looks_like_json_lines(path, first[1])):
        return TEXT, _text_records(lines)
    found = kind or _record_kind(first[0], _parse_object(*first))
    return found, _json_records(lines, found, forced=kind is not None)


def first_records(path: str | os.PathLike, kind: str, count: int) -> list[dict]:
    """The first `count` records of a stored dataset of known kind, reading no further (previews)."""
    with open(path, "rb") as file:
        lines = _numbered(line.decode("utf-8", errors="replace") for line in file)
        records = _text_records(lines) if _check_kind(kind) == TEXT else _json_records(lines, kind, forced=True)
        return list(itertools.islice(records, count))


def _check_size(path: Path, max_bytes: int) -> None:
    if not path.is_file():
        raise DatasetError(f"Dataset file '{path}' does not exist.")
    size = path.stat().st_size
    if size > max_bytes:
        raise DatasetError.of(
            "Dataset is too large: %(size)s MiB; the limit is %(limit)s MiB.", size=_mib(size), limit=_mib(max_bytes)
        )


def _checked_lines(path: Path) -> Iterator[Numbered]:
    """The non-blank lines, each refused if it holds a NUL byte or isn't UTF-8 (naming the file offset)."""
    with open(path, "rb") as file:
        offset = 0
        for number, raw in enumerate(file, start=1):  # binary lines end at b"\n" only, as records do
            nul = raw.find(b"\x00")
            if nul >= 0:
                raise DatasetError.of(
                    "Dataset looks binary: it contains a NUL byte at offset %(offset)s.", offset=offset + nul
                )
            try:
                line = raw.decode("utf-8")  # \n is never inside a UTF-8 sequence: lines decode on their own
            except UnicodeDecodeError as exc:
                raise DatasetError.of(
                    "Dataset is not UTF-8 text: invalid byte at offset %(offset)s.", offset=offset + exc.start
                ) from None
            offset += len(raw)
            yield from _numbered([line], start=number)


def _check_kind(kind: str | None) -> str | None:
    if kind is not None and kind not in KINDS:
        raise DatasetError(f"Unknown dataset kind '{kind}': use one of {', '.join(KINDS)}.")
    return kind


def _looks_like_json_lines(path: Path, first: str) -> bool:
    """JSON lines for .jsonl/.ndjson names or a first line that opens an object; plain text otherwise."""
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES or suffix in TEXT_SUFFIXES:
        return suffix in JSONL_SUFFIXES
    return first.lstrip().startswith("{")


def _numbered(lines: Iterable[str], start: int = 1) -> Iterator[Numbered]:
    """(line number, line without its end) for the non-blank lines; lines end at \\n only."""
    for number, line in enumerate(lines, start=start):
        line = line.rstrip("\r\n")
        if line.strip():
            yield number, line


def _text_records(lines: Iterable[Numbered]) -> Iterator[dict]:
    return ({"text": line} for _, line in lines)


def _json_records(lines: Iterable[Numbered], kind: str, *, forced: bool) -> Iterator[dict]:
    """Every line parsed and checked, all of `kind` (asked for when forced, else the first line's)."""
    first_line = 0
    for number, line in lines:
        record = _parse_object(number, line)
        found = _record_kind(number, record)
        first_line = first_line or number
        if found != kind and not forced:
            raise DatasetError.of(
                "Line %(line)s: a %(found)s record in a dataset of %(kind)s records (as line %(first)s); mixed "
                "kinds: every record must be of one kind.",
                line=number,
                found=SHAPES[found],
                kind=SHAPES[kind],
                first=first_line,
            )
        if found != kind:
            raise DatasetError.of(
                "Line %(line)s: a %(found)s record where %(kind)s records were asked for.",
                line=number,
                found=SHAPES[found],
                kind=SHAPES[kind],
            )
        _VALIDATORS[kind](number, record)
        yield record


def _parse_object(number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError.of(
            "Line %(line)s: not valid JSON: %(why)s (column %(column)s).", line=number, why=exc.msg, column=exc.colno
        ) from None
    except RecursionError:  # the decoder recurses once per bracket
        raise _too_deep(number) from None
    if not isinstance(record, dict):
        raise DatasetError.of(
            "Line %(line)s: must be a JSON object, not %(type)s.", line=number, type=_json_type(record)
        )
    surrogate = SURROGATE_ESCAPE.search(line)
    if surrogate or line.count("[") + line.count("{") > MAX_RECORD_DEPTH:
        _check_plain(number, record, surrogate[0] if surrogate else "")
    return record


def _check_plain(number: int, record: dict, escape: str) -> None:
    """Refuse a record nested deeper than MAX_RECORD_DEPTH, or with a string (or key) that no UTF-8 holds."""
    stack: list[tuple[int, Any]] = [(1, record)]
    while stack:
        depth, node = stack.pop()
        if depth > MAX_RECORD_DEPTH:
            raise _too_deep(number)
        children = list(node.items()) if isinstance(node, dict) else node if isinstance(node, list) else []
        for child in children:
            key, value = child if isinstance(node, dict) else ("", child)
            if escape and not (_encodable(key) and (not isinstance(value, str) or _encodable(value))):
                raise DatasetError.of(
                    "Line %(line)s: %(escape)s is half of a UTF-16 surrogate pair, not a character; write the "
                    "character itself (or both halves of its pair).",
                    line=number,
                    escape=escape,
                )
            stack.append((depth + 1, value))


def _too_deep(number: int) -> DatasetError:
    return DatasetError.of(
        "Line %(line)s: nested deeper than %(depth)s levels; a record is a flat object.",
        line=number,
        depth=MAX_RECORD_DEPTH,
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _record_kind(number: int, record: dict) -> str:
    """A record's kind from its keys: "messages" (chat), "prompt"/"completion", else "text"."""
    if "messages" in record:
        return CHAT
    if "prompt" in record or "completion" in record:
        return COMPLETION
    if "text" in record:
        return JSONL
    keys = ", ".join(f'"{key}"' for key in list(record)[:5]) or Words("none")
    raise DatasetError.of(
        'Line %(line)s: a record needs a "text" field, a "messages" list, or "prompt" and "completion" '
        "fields; its keys are %(keys)s.",
        line=number,
        keys=keys,
    )


def _require_string(number: int, record: dict, key: str) -> None:
    if key not in record:
        raise DatasetError.of('Line %(line)s: missing "%(key)s".', line=number, key=key)
    if not isinstance(record[key], str):
        raise DatasetError.of(
            'Line %(line)s: "%(key)s" must be a string, not %(type)s.',
            line=number,
            key=key,
            type=_json_type(record[key]),
        )


def _validate_text(number: int, record: dict) -> None:
    _require_string(number, record, "text")


def _validate_completion(number: int, record: dict) -> None:
    _require_string(number, record, "prompt")
    _require_string(number, record, "completion")


def _validate_chat(number: int, record: dict) -> None:
    messages = record["messages"]
    if not isinstance(messages, list):
        raise DatasetError.of(MESSAGES_SHAPE + ", not %(type)s.", line=number, type=_json_type(messages))
    if not messages:
        raise DatasetError.of('Line %(line)s: "messages" is empty.', line=number)
    for index, message in enumerate(messages, start=1):
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise DatasetError.of(MESSAGES_SHAPE + " (message %(index)s is not).", line=number, index=index)
        if message["role"] not in ROLES:
            raise DatasetError.of(
                'Line %(line)s: message %(index)s has the unknown role "%(role)s"; '
                'use "system", "user" or "assistant".',
                line=number,
                index=index,
                role=message["role"],
            )
    if not any(message["role"] == "assistant" for message in messages):
        raise DatasetError.of(
            'Line %(line)s: no "assistant" message; a chat record trains on its assistant turns.', line=number
        )


_VALIDATORS = {JSONL: _validate_text, CHAT: _validate_chat, COMPLETION: _validate_completion}


def _has_target(kind: str, record: dict) -> bool:
    """Whether the record has non-blank text where the loss is."""
    if kind == CHAT:
        return any(m["content"].strip() for m in record["messages"] if m["role"] == "assistant")
    return bool(record["completion" if kind == COMPLETION else "text"].strip())


def _check_something_to_train_on(kind: str, trained: bool) -> None:
    if trained:
        return
    if kind == CHAT:
        raise DatasetError.of("Dataset has nothing to train on: every assistant message is empty.")
    field = "completion" if kind == COMPLETION else "text"
    raise DatasetError.of('Dataset has nothing to train on: every record\'s "%(field)s" is empty.', field=field)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return Words(names.get(type(value), "a number"))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"
