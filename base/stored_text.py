"""Text written once and read later by anyone, in the reader's language (docs/I18N.md, "Stored text").

An event message, a status reason or a ledger memo is written by whichever request or worker caused it
and read later by people who speak other languages. Like Django admin's LogEntry, it is stored twice:
its English (the column the API, exports and old code read, unchanged) and, next to it, a structured
form, the message id (an English `gettext_noop` msgid with named `%(x)s` placeholders) and its values,
which the pages render in the reader's language:

    reason = StoredText(gettext_noop("Trained %(steps)s steps; final loss %(loss).4f"), steps=120, loss=0.41)
    job.status_reason, job.status_reason_text = reason.english(), reason.as_data()
    ...
    render(job.status_reason_text, job.status_reason)  # in the active language

A value is a plain JSON value (numbers, hostnames, chip names, money already formatted: shown as they
are) or itself a StoredText (a choice's label, `StoredText.label(member)`; a reason inside a reason),
rendered in the reader's language too. Whatever can't be rendered (a row written before this, a msgid
whose placeholders changed, a broken translation) shows its stored English.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils import translation
from django.utils.translation import gettext

CASES = ("lower", "capfirst")  # English-only case changes of a nested text (a label inside a sentence)


class StoredText:
    """A message id and its values: English for the database column, any language for a page."""

    __slots__ = ("case", "msgid", "params")

    def __init__(self, msgid: str, params: Mapping[str, Any] | None = None, /, *, case: str = "", **values: Any):
        if case and case not in CASES:
            raise ValueError(f"unknown case {case!r}")
        self.msgid, self.case = str(msgid), case
        self.params = {name: _value(value) for name, value in {**(params or {}), **values}.items()}

    @classmethod
    def label(cls, member, *, case: str = "") -> StoredText:
        """A choice's label (its msgid is its English), rendered in the reader's language."""
        with translation.override("en"):
            return cls(str(member.label), case=case)

    @classmethod
    def of(cls, text: str | StoredText) -> StoredText:
        """Text as given: a StoredText, or a plain string kept as it is (shown in English to everyone)."""
        return text if isinstance(text, StoredText) else cls("%(text)s", text=str(text))

    def cased(self, case: str) -> StoredText:
        """The same text with an English case rule (see CASES): a label or a detail inside a sentence."""
        return StoredText(self.msgid, self.params, case=case)

    def english(self) -> str:
        with translation.override("en"):
            return self.render()

    def render(self) -> str:
        """In the active language (raises KeyError, TypeError or ValueError when msgid and values don't fit)."""
        return _render(self.as_data())

    def as_data(self) -> dict:
        data: dict = {
            "msgid": self.msgid,
            "params": {
                name: value.as_data() if isinstance(value, StoredText) else value for name, value in self.params.items()
            },
        }
        if self.case:
            data["case"] = self.case
        return data

    @classmethod
    def from_data(cls, data: Mapping) -> StoredText:
        params = {
            name: cls.from_data(value) if _is_text(value) else value
            for name, value in (data.get("params") or {}).items()
        }
        return cls(data["msgid"], params, case=data.get("case", ""))

    def __str__(self) -> str:
        return self.english()

    def __repr__(self) -> str:
        return f"StoredText({self.msgid!r}, {self.params!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredText) and self.as_data() == other.as_data()

    def __hash__(self) -> int:
        return hash(self.msgid)


def column_text(stored: str, data: Mapping | None) -> str | StoredText:
    """A column back as it was set: its StoredText when its msgid and values still say what the English
    column says, else the English as stored (to pass on, e.g. a job's reason into its end)."""
    if stored and _is_text(data):
        try:
            text = StoredText.from_data(data)
            if text.english() == stored:
                return text
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
    return stored


def english(text: str | StoredText) -> str:
    """What goes into the English column: a plain string as it is, a StoredText's English."""
    return text.english() if isinstance(text, StoredText) else text


def data_of(text: str | StoredText) -> dict:
    """What goes into the structured column: {} for a plain string (shown as stored)."""
    return text.as_data() if isinstance(text, StoredText) else {}


def render(data: Mapping | None, fallback: str = "") -> str:
    """Stored text in the active language; `fallback` (the stored English) when there is none, or it can't
    be rendered."""
    if not _is_text(data):
        return fallback
    try:
        return _render(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return fallback


def render_column(stored: str, data: Mapping | None) -> str:
    """A column's English and its msgid and values, in the active language: the msgid and values only when
    they still say what the English column says (a column set without them, by an older release or by
    hand in the operator console, shows as stored)."""
    text = column_text(stored, data)
    return render(data, stored) if isinstance(text, StoredText) else stored


def _render(data: Mapping) -> str:
    msgid = data["msgid"]
    translated = gettext(msgid) if msgid else ""
    params = data.get("params") or {}
    values = {name: _render(value) if _is_text(value) else value for name, value in params.items()}
    text = translated % values if values or "%(" in msgid else translated
    if translated == msgid:  # English (or no translation yet): the English case rules apply
        case = data.get("case", "")
        if case == "lower":
            text = text.lower()
        elif case == "capfirst":
            text = text[:1].upper() + text[1:]
    return text


def _is_text(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("msgid"), str)


def _value(value: Any) -> Any:
    """A value as it is stored: JSON's scalars and StoredText as they are; anything else as its text."""
    if value is None or isinstance(value, StoredText | bool | int | float | str):
        return value
    return str(value)


class StatusReasonMixin:
    """For a model whose `status_reason` holds a reason's English and `status_reason_text` its msgid and values
    (a job, a deployment): set both at once, pass the reason on as it was set, show it to the reader."""

    status_reason: str
    status_reason_text: dict

    def set_status_reason(self, reason: str | StoredText) -> str:
        """Set the reason in both columns (save both: "status_reason", "status_reason_text"); its English."""
        self.status_reason, self.status_reason_text = english(reason), data_of(reason)
        return self.status_reason

    def stored_reason(self) -> str | StoredText:
        """The status reason as it was set (a StoredText, or plain English), to pass on."""
        return column_text(self.status_reason, self.status_reason_text)

    @property
    def reason_text(self) -> str:
        """The status reason in the active language (as stored when it was stored as plain text)."""
        return render_column(self.status_reason, self.status_reason_text)
