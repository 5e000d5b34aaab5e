"""Money is integer micro-units of the platform currency. These are the only conversions and formats.

Amounts as numbers ("10.00", for the API, CSV and forms): `format_amount`. Exact amounts for people,
with the currency symbol: `format_price` ("¥1.20", "¥0.000333", a dash for none: prices per chip-hour,
where the sixth decimal matters, and the exact figure behind a rounded one) and `format_signed`
("+¥10.00", "−¥1.50"). Balances, costs, charges and refunds for people: `format_money` ("¥9.88",
"¥1,234.57", "<¥0.01") and `format_money_signed` ("+¥10.00", "−¥9.88"), rounded to cents half up;
what a refusal says is needed, rounded up (`format_money_needed`);
pages show them with the exact amount on hover (the `money` template filters).
`format_estimate` is for quotes and shows them as `format_money` does: an estimate is no more exact than a cent.

Money over time has one rule: a price per chip-hour times a span, in whole microseconds, divided by an
hour and rounded once, half up (`cost_over`; `cost_of_integral` when the price changes within the span
and the caller sums price × microseconds itself, as the meter and insurance do). How long a balance
lasts at a rate is its inverse, `seconds_covered`. The planner's quotes
are estimates from float seconds and keep their own arithmetic (`kernel.planner.evaluate.total_cost`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal, InvalidOperation

MICROS_PER_UNIT = 1_000_000
MICROSECOND = timedelta(microseconds=1)
MICROSECONDS_PER_HOUR = 3600 * 1_000_000
CENT = Decimal("0.01")
MINUS = "−"  # U+2212: the same width as "+" in a column of amounts
# The symbol where no Django settings are configured (the planner run on its own); the settings'
# CURRENCY_SYMBOL has the same default.
DEFAULT_CURRENCY_SYMBOL = "¥"
NO_AMOUNT = "—"


class InvalidAmount(ValueError):
    """An amount that is not a finite decimal number with at most six decimal places."""


def to_micros(amount: Decimal | str | int) -> int:
    """Parse a currency amount ("10", "10.5", Decimal("0.000001")) into exact micro-units."""
    try:
        value = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        raise InvalidAmount(f"'{amount}' is not a number.") from None
    if not value.is_finite():
        raise InvalidAmount(f"'{amount}' is not a finite number.")
    micros = value * MICROS_PER_UNIT
    if micros != micros.to_integral_value():
        raise InvalidAmount(f"'{amount}' has more than six decimal places.")
    return int(micros)


def round_micros(value: Decimal) -> int:
    """The one rounding rule for computed money (half up, to a whole micro-unit)."""
    return int(value.to_integral_value(rounding=ROUND_HALF_UP))


def divide_half_up(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half away from zero, in integers: `round_micros`'s rule, exactly,
    without a Decimal context whose precision a large numerator could exceed."""
    whole, rest = divmod(abs(numerator), denominator)
    whole += 2 * rest >= denominator
    return whole if numerator >= 0 else -whole


def cost_over(per_hour: int, span: timedelta) -> int:
    """What `per_hour` micro-units an hour cost over `span`, rounded once, half up: money over time."""
    return cost_of_integral(per_hour * (span // MICROSECOND))


def cost_of_integral(price_microseconds: int) -> int:
    """Money for Σ per_hour × microseconds (prices that change within a span, chips folded in), rounded
    once, half up. Rounding the sum, never its parts, is what keeps many ticks equal to one charge."""
    return divide_half_up(price_microseconds, MICROSECONDS_PER_HOUR)


def seconds_covered(amount: int, per_hour: int) -> float | None:
    """How long `amount` pays for `per_hour` (cost_over's inverse), in seconds; None when nothing is spent."""
    if per_hour <= 0:
        return None
    return amount * 3600 / per_hour


def to_decimal(micros: int) -> Decimal:
    """Micro-units as an exact Decimal in currency units."""
    return Decimal(micros) / MICROS_PER_UNIT


def format_amount(micros: int) -> str:
    """ "10.00", "0.000333", "-1.50": at least two decimals, more only when they carry value."""
    text = f"{to_decimal(micros):.6f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def _default_symbol() -> str:
    return DEFAULT_CURRENCY_SYMBOL


_symbol_source: Callable[[], str] = _default_symbol


def read_currency_symbol_from(source: Callable[[], str]) -> None:
    """Where amounts take their symbol from: the site installs its settings here (`base.apps`), so a
    programme outside the site (the planner in a script, a bench) formats with the default."""
    global _symbol_source
    _symbol_source = source


def currency_symbol() -> str:
    """The symbol, read when an amount is formatted, not when this module is imported."""
    return _symbol_source()


def format_price(micros: int | None) -> str:
    """An amount for people: "¥1.20", "¥0.000333"; a dash when there is none."""
    return NO_AMOUNT if micros is None else f"{currency_symbol()}{format_amount(micros)}"


def format_signed(micros: int) -> str:
    """The sign first ("+¥10.00", "−¥1.50"), so a column of amounts reads at a glance."""
    sign = MINUS if micros < 0 else "+"
    return f"{sign}{format_price(abs(micros))}"


def format_money(micros: int | None) -> str:
    """An amount for people, to the cent, rounded half up: "¥9.88", "¥1,234.57", "−¥1.50".

    A non-zero amount that rounds to nothing shows "<¥0.01", not "¥0.00": a charge of ¥0.000333
    happened and must not read as free. A dash when there is none.
    """
    if micros is None:
        return NO_AMOUNT
    sign = MINUS if micros < 0 else ""
    return f"{sign}{_cents(abs(micros))}"


def format_money_needed(micros: int) -> str:
    """What must be there at least, to the cent rounded up: "¥0.11" for ¥0.100001. Rounded half up, a need
    would read "¥0.10" beside a balance of ¥0.10 that doesn't cover it."""
    cents = to_decimal(micros).quantize(CENT, rounding=ROUND_CEILING)
    return f"{MINUS if cents < 0 else ''}{currency_symbol()}{abs(cents):,}"


def format_money_signed(micros: int) -> str:
    """`format_money` with its sign always first ("+¥10.00", "−¥0.05", "+<¥0.01"), for ledger columns."""
    sign = MINUS if micros < 0 else "+"
    return f"{sign}{_cents(abs(micros))}"


def _cents(micros: int) -> str:
    cents = to_decimal(micros).quantize(CENT, rounding=ROUND_HALF_UP)
    if micros and not cents:
        return f"<{currency_symbol()}{CENT}"
    return f"{currency_symbol()}{cents:,}"


def format_estimate(micros: int) -> str:
    """An estimated amount, to the cent like every amount people read ("¥1,234.57", "¥0.07", "<¥0.01")."""
    return format_money(micros)
