"""ASGI entry point of the agent service (uvicorn portal.asgi:application), not of the site.

The site stays on gunicorn (portal/wsgi.py). This process answers only the node agents' endpoints,
/api/v1/agent/{enroll,poll,report}/, asynchronously: thousands of long-polls wait here without a
thread each (workers/agent_service/). In production a reverse proxy routes /api/v1/agent/ here
(docs/OPERATIONS.md, "Agent service").
"""

import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()
# The event loop hands each wake-up to its poll between the database threads' Python work (a report's
# validation and writes are ~8 ms of it): it gets the GIL back after 1 ms instead of Python's 5.
sys.setswitchinterval(0.001)

from workers.agent_service.app import AgentService  # noqa: E402 - needs the apps loaded above

application = AgentService()
