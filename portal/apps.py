from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("Portal")

    def ready(self) -> None:
        from portal import signals  # noqa: F401
        from portal.api import auth_schemes  # noqa: F401
