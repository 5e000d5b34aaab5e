from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = _("Node enrollment")

    def ready(self) -> None:
        from workers import receivers  # noqa: F401  (connects what billing and the market announce)
