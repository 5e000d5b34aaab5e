from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Node enrollment"

    def ready(self) -> None:
        from workers import receivers  # noqa: F401  (connects what billing and the market announce)
