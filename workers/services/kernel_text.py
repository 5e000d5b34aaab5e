"""A kernel refusal in the reader's language.

The kernel has no translations: an error that users read (`DatasetError.of`, `ModelFileError.of`,
`UnsupportedModel.of`) keeps its English template and values beside its message, and a value that is
English words is a `kernel.words.Words`. Said here, the template and those words go through gettext; numbers,
names and what the user wrote stay as they are.
"""

from __future__ import annotations

from django.utils.translation import gettext

from kernel.words import Words


def in_readers_language(error: Exception) -> str:
    """The error's message in the active language; as it is when made without a template, or when a broken
    translation lost a placeholder (the English is right)."""
    template = getattr(error, "template", "")
    if not template:
        return str(error)
    try:
        return gettext(template) % said(error.values)
    except (KeyError, TypeError, ValueError):
        return str(error)


def said(values: dict) -> dict:
    """A refusal's values with every `Words` in the reader's language (and the Words among its own values)."""
    return {name: _said(value) for name, value in values.items()}


def _said(value):
    if not isinstance(value, Words) or not value:
        return value
    if value.values:
        return gettext(value.template) % said(value.values)
    return gettext(value.template)
