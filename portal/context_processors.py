"""Values every page template needs."""

from __future__ import annotations

from functools import partial

from django.conf import settings

from billing.services.ledger import balance_of


def platform(request) -> dict:
    """The currency, and for a signed-in user the balance the header shows (linking to the billing page).

    The balance is a callable, which the template calls when it renders the header: one query for a
    full page, none for the htmx partials (the live quote, the job page's polls) that don't show it.
    """
    values = {"CURRENCY": settings.CURRENCY, "CURRENCY_SYMBOL": settings.CURRENCY_SYMBOL}
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        values["header_balance"] = partial(balance_of, user)
    return values
