from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BaseConfig(AppConfig):
    """What every app builds on: the API's error format, idempotency, field types, money, read-only admin."""

    name = "base"
    verbose_name = _("Base")

    def ready(self) -> None:
        from django.conf import settings

        from kernel import money

        # Amounts take the settings' CURRENCY_SYMBOL, read on each use (override_settings works).
        money.read_currency_symbol_from(lambda: settings.CURRENCY_SYMBOL)

        # The admin's times with their zone: the admin app, listed first, has registered every ModelAdmin by now.
        from base import admin_times

        admin_times.install()
