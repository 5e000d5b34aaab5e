"""The untranslated-text check itself: it must catch English and let names, numbers and code through."""

from __future__ import annotations

from tests.portal.i18n.visible_text import needs_translation, untranslated


def test_english_prose_needs_translation():
    assert needs_translation("Top up your balance")
    assert needs_translation("Cost so far: ¥12.30")


def test_chinese_names_numbers_and_units_pass():
    assert not needs_translation("充值余额")
    assert not needs_translation("RTX 4090 × 2 · 12.5 tokens/s")
    assert not needs_translation("¥1,234.56")
    assert not needs_translation("2026-12-07 14:05 CST")
    assert not needs_translation("#42")


def test_the_tests_own_names_can_be_allowed():
    assert needs_translation("alice-finetune")
    assert not needs_translation("alice-finetune", also_allowed=("alice-finetune",))


def test_a_page_lists_its_english_texts_and_skips_code_and_scripts():
    html = """<html lang="zh-hans"><body><h1>训练</h1><p title="Your balance">余额</p>
    <code>curl -H "Authorization: Bearer"</code><script>var x = "English";</script>
    <button lang="en">English</button><input type="submit" value="Launch"><p>Cancel run</p></body></html>"""
    assert untranslated(html) == ["Your balance", "Launch", "Cancel run"]
