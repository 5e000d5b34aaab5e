"""Starverse portal: settings, URLs, the Celery app, accounts, pages and the REST API."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
