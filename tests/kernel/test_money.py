from decimal import Decimal

import pytest

from kernel.money import (
    InvalidAmount,
    format_amount,
    format_estimate,
    format_price,
    format_signed,
    round_micros,
    to_micros,
)


@pytest.mark.parametrize(
    ("text", "micros"),
    [("10", 10_000_000), ("10.00", 10_000_000), ("0.000001", 1), ("-1.5", -1_500_000), (" 2.8 ", 2_800_000)],
)
def test_it_parses_amounts_exactly(text, micros):
    assert to_micros(text) == micros


@pytest.mark.parametrize("text", ["abc", "", "1e400x", "NaN", "Infinity", "0.0000001"])
def test_it_refuses_what_is_not_an_exact_amount(text):
    with pytest.raises(InvalidAmount):
        to_micros(text)


@pytest.mark.parametrize(
    ("micros", "text"),
    [(10_000_000, "10.00"), (333, "0.000333"), (-1_500_000, "-1.50"), (0, "0.00"), (1_234_567, "1.234567")],
)
def test_it_formats_with_two_decimals_or_more_when_they_carry_value(micros, text):
    assert format_amount(micros) == text


def test_it_rounds_half_up_once():
    assert round_micros(Decimal("2.5")) == 3
    assert round_micros(Decimal("2.4999")) == 2


def test_prices_for_people_carry_the_configured_symbol_and_a_dash_for_none(settings):
    settings.CURRENCY_SYMBOL = "€"
    assert format_price(1_200_000) == "€1.20"
    assert format_price(333) == "€0.000333"
    assert format_price(None) == "—"


def test_signed_amounts_lead_with_their_sign():
    assert format_signed(10_000_000) == "+¥10.00"
    assert format_signed(-1_500_000) == "−¥1.50"


@pytest.mark.parametrize(
    ("micros", "text"),
    [(1_234_567_890, "¥1,234.57"), (1_000_000, "¥1.00"), (999_999, "¥1.00"), (66_231, "¥0.07"), (333, "<¥0.01")],
)
def test_estimates_show_cents_as_every_amount_people_read(micros, text):
    assert format_estimate(micros) == text
