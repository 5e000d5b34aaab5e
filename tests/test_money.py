from decimal import Decimal

import pytest

from billing.money import InvalidAmount, format_amount, round_micros, to_micros


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
