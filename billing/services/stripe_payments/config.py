"""What every Stripe flow shares: the errors it raises, the configuration, and amounts in minor units."""

from __future__ import annotations

import re
from urllib.parse import urlparse

import stripe
from django.conf import settings
from django.utils.translation import gettext as _

from kernel.money import MICROS_PER_UNIT, format_amount

# Currencies without a minor unit (Stripe's list); everything else here has two decimals.
ZERO_DECIMAL_CURRENCIES = {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv"}
# What a top-up can be paid with, by currency; Alipay and WeChat Pay take yuan (they must be
# enabled on the Stripe account). Anything else: cards only.
PAYMENT_METHOD_TYPES = {"cny": ["card", "alipay", "wechat_pay"]}
TEST_KEY_PREFIXES = ("sk_test_", "rk_test_")
REAL_STRIPE_JS_HOST = "js.stripe.com"
NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class PaymentError(Exception):
    """A top-up or refund that cannot go ahead; the message is safe to show to the user."""


class NotConfigured(PaymentError):
    """No Stripe keys in the settings."""


class CardDeclined(PaymentError):
    """Stripe refused the card; the message is Stripe's, e.g. "Your card was declined."."""


# -- configuration -----------------------------------------------------------------------------


def is_configured() -> bool:
    return bool(settings.STRIPE_SECRET_KEY and settings.STRIPE_PUBLISHABLE_KEY)


def is_test_mode() -> bool:
    """A Stripe test key: no real money moves (the billing page says so, in production too)."""
    return is_configured() and settings.STRIPE_SECRET_KEY.startswith(TEST_KEY_PREFIXES)


def uses_payment_element() -> bool:
    """Whether the page loads Stripe's own Stripe.js (Payment Element); a stand-in has only a card element."""
    return urlparse(settings.STRIPE_JS_URL).hostname == REAL_STRIPE_JS_HOST


def payment_method_types(currency: str) -> list[str]:
    return list(PAYMENT_METHOD_TYPES.get(currency.lower(), ["card"]))


def configure_stripe() -> None:
    """Point the stripe library at the configured server; read settings each call (tests override them)."""
    if not is_configured():
        raise NotConfigured(_("Top-ups are not configured on this platform (no Stripe keys)."))
    stripe.api_key = settings.STRIPE_SECRET_KEY
    stripe.api_base = settings.STRIPE_API_BASE


# -- amounts -----------------------------------------------------------------------------------


def minor_unit_micros(currency: str) -> int:
    """Micro-units in one of the currency's minor units (a fen is 10,000 micro-yuan)."""
    return MICROS_PER_UNIT if currency.lower() in ZERO_DECIMAL_CURRENCIES else MICROS_PER_UNIT // 100


def to_minor(micros: int, currency: str) -> int:
    unit = minor_unit_micros(currency)
    if micros % unit:
        raise PaymentError(
            _("%(amount)s cannot be charged in whole %(currency)s minor units.")
            % {"amount": format_amount(micros), "currency": currency.upper()}
        )
    return micros // unit


def from_minor(minor: int, currency: str) -> int:
    return int(minor) * minor_unit_micros(currency)
