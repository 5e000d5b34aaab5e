"""The Celery app: broker on Redis, tasks discovered from every installed app."""

from __future__ import annotations

import os

from celery import Celery

from portal import beat  # noqa: F401  (the beat marks its ticks for /metrics)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Every task's `delay_on_commit` treats a broker outage as logged, not raised (portal.task_base).
app = Celery("starverse", task_cls="portal.task_base:PlatformTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
