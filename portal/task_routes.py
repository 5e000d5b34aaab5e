"""Which Celery queue a task goes to: planning on a queue of its own, everything else on the default.

Users can fill the planning queue (each queued job is planned there); the meter, the reconciler
(lost nodes, notices, crashes, credit stops), spot clearing and ledger audits stay on the default
queue, served by another worker, so they run on time whatever waits to be planned. The planning
queue's name is derived from the default queue in force when the task is sent, so a test stack on
a private queue `test-1234` gets `test-1234.planning` without further configuration.
"""

from __future__ import annotations

from celery import current_app

PLANNING_TASKS = frozenset({"workers.tasks.schedule_job", "workers.tasks.schedule_waiting_jobs"})
PLANNING_SUFFIX = ".planning"


def planning_queue(default_queue: str) -> str:
    return default_queue + PLANNING_SUFFIX


def route_task(name, args, kwargs, options, task=None, **kw):
    """Celery router (CELERY_TASK_ROUTES): planning tasks to `<default queue>.planning`, others unrouted."""
    if name not in PLANNING_TASKS:
        return None
    app = task.app if task is not None else current_app
    return {"queue": planning_queue(app.conf.task_default_queue)}
