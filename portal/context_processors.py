"""Values every page template needs."""

from __future__ import annotations

from django.conf import settings


def platform(request) -> dict:
    return {"CURRENCY": settings.CURRENCY, "CURRENCY_SYMBOL": settings.CURRENCY_SYMBOL}
