"""The Celery app: broker on Redis, tasks discovered from every installed app."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("starverse")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
