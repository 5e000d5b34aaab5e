"""The async agent service: the three agent endpoints for thousands of long-polling node agents.

Run by uvicorn as its own process (portal/asgi.py; `make run` starts it as "agents" on AGENT_PORT).
A waiting poll is an asyncio Event here, not a web-server thread; wake-ups come from one Redis
subscription per process (wakeups.py); ORM work runs on a few threads (app.py). The answers are the
sync views' (workers.services.agent_endpoints). docs/OPERATIONS.md, "Agent service".
"""
