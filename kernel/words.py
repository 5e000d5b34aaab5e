"""`Words`: an English phrase among a kernel error's values that the reader's language replaces.

The kernel has no translations: an error that users read keeps its English template and values beside its
message (`DatasetError.of`, `ModelFileError.of`), and the platform says it in the reader's language. Most
values are shown as they are (numbers, file and tensor names, what a user wrote); a value that is English
words is a `Words`, whose msgid is the phrase itself, or, made with `Words.of(template, **values)`, its
template, with values of its own (which may be Words too). No Django.
"""

from __future__ import annotations


class Words(str):
    """An English phrase among an error's values that a reader's language replaces (it is its own msgid)."""

    template: str
    values: dict

    def __new__(cls, phrase: str, template: str = "", values: dict | None = None) -> Words:
        words = super().__new__(cls, phrase)
        words.template, words.values = template or phrase, dict(values or {})
        return words

    @classmethod
    def of(cls, template: str, **values) -> Words:
        """The phrase `template % values`, whose template is its msgid."""
        return cls(template % values, template, values)

    @classmethod
    def joined(cls, phrases: list, separator: str = "; ") -> Words:
        """The phrases one after the other, each said in the reader's language (the separator stays)."""
        names = [f"phrase{index}" for index in range(len(phrases))]
        return cls.of(separator.join(f"%({name})s" for name in names), **dict(zip(names, phrases, strict=True)))
