"""WSGI entry point for gunicorn."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
# Import every view now rather than on the first request: under gunicorn's --preload this happens
# once, before the workers fork, so a (re)started web server answers its first request sooner.
get_resolver().url_patterns  # noqa: B018 - evaluated for its imports
