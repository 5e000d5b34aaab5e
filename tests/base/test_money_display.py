"""Money for people: to the cent (half up), never "¥0.00" for a real charge, the exact amount on hover."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

from base.templatetags.money import money_html, signed_money_html
from kernel.money import format_money, format_money_signed


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (9_880_288, "¥9.88"),
        (9_885_000, "¥9.89"),  # half up
        (9_884_999, "¥9.88"),
        (10_000_000, "¥10.00"),
        (1_234_567_890, "¥1,234.57"),
        (0, "¥0.00"),
        (5_000, "¥0.01"),  # half a cent rounds up to one
        (4_999, "<¥0.01"),  # a real charge never reads as free
        (1, "<¥0.01"),
        (-1_500_000, "−¥1.50"),
        (-333, "−<¥0.01"),
        (None, "—"),
    ],
)
def test_amounts_show_to_the_cent_rounded_half_up(micros, text):
    assert format_money(micros) == text


@pytest.mark.parametrize(
    ("micros", "text"),
    [(10_000_000, "+¥10.00"), (-9_880_288, "−¥9.88"), (-1, "−<¥0.01"), (0, "+¥0.00")],
)
def test_signed_amounts_lead_with_their_sign(micros, text):
    assert format_money_signed(micros) == text


def test_the_currency_symbol_is_the_configured_one(settings):
    settings.CURRENCY_SYMBOL = "€"
    assert format_money(9_880_288) == "€9.88"
    assert format_money(1) == "<€0.01"


def render(source: str, **context) -> str:
    return Template("{% load money %}" + source).render(Context(context))


def test_the_money_filter_shows_cents_with_the_exact_amount_on_hover():
    assert render("{{ m|money }}", m=9_880_288) == '<span class="money" title="¥9.880288">¥9.88</span>'
    assert render("{{ m|money }}", m=333) == '<span class="money" title="¥0.000333">&lt;¥0.01</span>'
    assert render("{{ m|money }}", m=-1_500_000) == '<span class="money" title="−¥1.50">−¥1.50</span>'


def test_the_signed_money_filter_puts_the_sign_first_in_both():
    assert render("{{ m|signed_money }}", m=-9_880_288) == '<span class="money" title="−¥9.880288">−¥9.88</span>'
    assert render("{{ m|signed_money }}", m=10_000_000) == '<span class="money" title="+¥10.00">+¥10.00</span>'


@pytest.mark.parametrize("value", [None, "", "abc", 1.5, True, Decimal("1.5")])
def test_what_is_not_an_amount_shows_a_dash(value):
    assert render("{{ m|money }}|{{ m|signed_money }}", m=value) == "—|—"
    assert render("{{ missing|money }}") == "—"


def test_a_whole_decimal_from_a_database_sum_is_an_amount():
    assert money_html(Decimal("9880288")) == money_html(9_880_288)
    assert signed_money_html(Decimal("-5")) == '<span class="money" title="−¥0.000005">−&lt;¥0.01</span>'


def test_prices_per_chip_hour_keep_every_significant_decimal():
    assert render("{{ p|price }}", p=333) == "¥0.000333"
    assert render("{{ p|price }}", p=1_200_000) == "¥1.20"
