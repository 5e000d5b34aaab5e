"""Moved to base.money; kept while billing/services/{holds,meter,pricing,reservations}.py and others still import it."""

from base.money import MICROS_PER_UNIT, InvalidAmount, format_amount, round_micros, to_decimal, to_micros  # noqa: F401
