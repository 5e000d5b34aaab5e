from django.apps import AppConfig


class BaseConfig(AppConfig):
    """What every app builds on: the API's error format, idempotency, field types, money, read-only admin."""

    name = "base"
    verbose_name = "Base"
