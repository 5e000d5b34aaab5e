from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FleetConfig(AppConfig):
    """The shared data model: chip types, pools, nodes, jobs, allocations and uploads (no services)."""

    name = "fleet"
    verbose_name = _("Compute fleet")
