"""What the `money` template filters render, for tests that read pages: cents shown, every micro-unit on hover."""

from __future__ import annotations


def money(shown: str, exact: str | None = None) -> str:
    """`<span class="money" title="¥9.880288">¥9.88</span>`; the title is the shown text when they agree."""
    return f'<span class="money" title="{exact or shown}">{shown}</span>'
