from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from portal import signals  # noqa: F401
        from portal.api import auth_schemes  # noqa: F401
