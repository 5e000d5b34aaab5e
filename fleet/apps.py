from django.apps import AppConfig


class FleetConfig(AppConfig):
    """The shared data model: chip types, pools, nodes, jobs, allocations and uploads (no services)."""

    name = "fleet"
    verbose_name = "Compute fleet"
