"""A kernel refusal in the reader's language.

The kernel has no translations: an error that users read (`PlanningError.of`, `DatasetError.of`,
`ModelFileError.of`, `UnsupportedModel.of`) keeps its English template and values beside its message, and a
value that is English words is a `kernel.words.Words`. Here they become a `base.stored_text.StoredText`
(its msgid the template, a Words value a StoredText of its own), which says them in the reader's language
now, or is stored to be said later; numbers, names and what the user wrote stay as they are.
"""

from __future__ import annotations

from base.stored_text import StoredText
from kernel.words import Words


def stored_text_of(error: Exception) -> StoredText | None:
    """The error's template and values as a StoredText; None for an error made without a template."""
    template = getattr(error, "template", "")
    return StoredText(template, _values(error.values)) if template else None


def in_readers_language(error: Exception) -> str:
    """The error's message in the active language; as it is when made without a template, or when a broken
    translation lost a placeholder (the English is right)."""
    text = stored_text_of(error)
    if text is None:
        return str(error)
    try:
        return text.render()
    except (KeyError, TypeError, ValueError):
        return str(error)


def to_store(error: Exception) -> str | StoredText:
    """What to store for the error (a job's status reason, an event): its StoredText, so pages say it in the
    reader's language, when that says in English what the error says; else the English."""
    text = stored_text_of(error)
    try:
        return text if text is not None and text.english() == str(error) else str(error)
    except (KeyError, TypeError, ValueError):  # a value JSON can't keep as it was
        return str(error)


def _values(values: dict) -> dict:
    return {name: _value(value) for name, value in values.items()}


def _value(value):
    if isinstance(value, Words) and value:
        return StoredText(value.template, _values(value.values))
    return value
