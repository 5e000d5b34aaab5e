"""Body parsers that refuse, by field, what PostgreSQL or Python can't take: NUL characters and deep nesting.

PostgreSQL refuses NUL (U+0000) in text and JSONB, UTF-8 can't hold a lone surrogate that JSON can
spell ("\\ud800"), and Python's JSON decoder recurses once per level (5,000 nested brackets exhaust
the stack). All are refused here, before any view sees the data, with a 400 in the API's error
format that names the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from django.utils.translation import gettext as _
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser

# No request of this API nests deeper than a few levels; 32 leaves room and stays far below the stack.
MAX_JSON_DEPTH = 32
NUL = "\x00"
NUL_CODE = "null_characters_not_allowed"


def nul_error(field: str, where: str = "") -> ValidationError:
    if where:
        message = _("Null characters (U+0000) are not allowed (at %(where)s).") % {"where": where}
    else:
        message = _("Null characters (U+0000) are not allowed.")
    return ValidationError({field: [ErrorDetail(message, NUL_CODE)]})


def too_deep(field: str) -> ValidationError:
    message = _("Nested deeper than %(depth)s levels.") % {"depth": MAX_JSON_DEPTH}
    return ValidationError({field: [ErrorDetail(message, "too_deep")]})


def surrogate_error(field: str, where: str = "") -> ValidationError:
    if where:
        message = _("Unpaired surrogate characters (\\ud800-\\udfff) are not allowed (at %(where)s).") % {
            "where": where
        }
    else:
        message = _("Unpaired surrogate characters (\\ud800-\\udfff) are not allowed.")
    return ValidationError({field: [ErrorDetail(message, "surrogate_characters_not_allowed")]})


def encodable(text: str) -> bool:
    """Whether the text is valid Unicode: JSON may carry a lone surrogate ("\\ud800"), which no UTF-8 holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(name: str) -> str:
    """A field name fit for an error message (and for UTF-8): NUL and lone surrogates spelt out as \\uXXXX."""
    return "".join(f"\\u{ord(c):04x}" if c == NUL or 0xD800 <= ord(c) <= 0xDFFF else c for c in name)


def walk(value: object, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """Every (path, node) of a decoded JSON document, iteratively (a deep one must not recurse here either)."""
    stack: list[tuple[tuple[str, ...], object]] = [(path, value)]
    while stack:
        where, node = stack.pop()
        yield where, node
        if isinstance(node, Mapping):
            for key, child in node.items():
                stack.append(((*where, str(key)), child))
        elif isinstance(node, list):
            for index, child in enumerate(node):
                stack.append(((*where, str(index)), child))


def check_document(data: object) -> None:
    """Refuse a document nested deeper than MAX_JSON_DEPTH, or with a NUL or lone surrogate in a key or string."""
    for path, node in walk(data):
        field = printable(path[0]) if path else "non_field_errors"
        where = ".".join(printable(part) for part in path[1:])
        if len(path) > MAX_JSON_DEPTH:
            raise too_deep(field)
        for text in (path[-1] if path else "", node if isinstance(node, str) else ""):
            if NUL in text:
                raise nul_error(field, where)
            if not encodable(text):
                raise surrogate_error(field, where)


class StrictJSONParser(JSONParser):
    """JSON, refusing NUL characters, lone surrogates and documents nested deeper than MAX_JSON_DEPTH."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # the decoder gives up on very deep documents before we can walk them
            raise too_deep("non_field_errors") from None
        check_document(data)
        return data


def check_form(data, files=None) -> None:
    """Refuse a NUL in any form field's name or value, or in an uploaded file's name."""
    for name, values in data.lists():
        if NUL in name or any(NUL in value for value in values):
            raise nul_error(printable(name))
    for name, upload in (files or {}).items():
        if NUL in (upload.name or ""):
            raise nul_error(printable(name), _("the file name"))


class StrictFormParser(FormParser):
    """URL-encoded forms, refusing NUL characters."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        check_form(data)
        return data


class StrictMultiPartParser(MultiPartParser):
    """Multipart forms with files, refusing NUL characters in fields and file names."""

    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        check_form(parsed.data, parsed.files)
        return parsed
