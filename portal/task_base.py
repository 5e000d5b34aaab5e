"""The base class of every Celery task here: a publish after commit never fails the request.

Services ask for work after their transaction commits (`schedule_job.delay_on_commit(job.pk)`).
Those messages are hints: the database already says what must happen (a queued job, a changed
bid), and the periodic passes that beat runs read it. So when the broker is unreachable the
publish is given up within the bounded timeouts and retries of the settings, logged, and the
request goes on; after one failure this process doesn't try again for a few seconds
(base.outage.outage_of). A caller that truly needs the message sent uses `delay()` and handles
`kombu.exceptions.OperationalError` itself (the Stripe webhook answers 503 so Stripe retries).

While a task runs, its log lines carry `task`, `task_id` and the `job_id`, `node_id` or
`chip_type_id` it was called with (structlog context, portal.logs).
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import structlog
from celery.contrib.django.task import DjangoTask
from django.db import transaction

from base.outage import UNAVAILABLE, outage_of

logger = logging.getLogger(__name__)

# Arguments of a task that name what it works on: bound to its log lines.
LOGGED_ARGUMENTS = ("job_id", "node_id", "chip_type_id")


class PlatformTask(DjangoTask):
    """DjangoTask whose `*_on_commit` publishes are hints: a broker outage is logged, not raised."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = {"task": self.name, "task_id": self.request.id, **self.subjects(args, kwargs)}
        with structlog.contextvars.bound_contextvars(**context):
            return super().__call__(*args, **kwargs)

    def subjects(self, args: Any, kwargs: Any) -> dict[str, Any]:
        """The job, node or chip type this call works on, by the run function's argument names."""
        try:
            bound = inspect.signature(self.run).bind_partial(*args, **kwargs).arguments
        except (TypeError, ValueError):
            return {}
        return {name: bound[name] for name in LOGGED_ARGUMENTS if bound.get(name) is not None}

    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        transaction.on_commit(functools.partial(self.publish_hint, args, kwargs))

    def apply_async_on_commit(self, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        transaction.on_commit(functools.partial(self.publish_hint, args or (), kwargs or {}, options))

    def publish_hint(self, args: Any, kwargs: Any, options: dict[str, Any] | None = None) -> bool:
        """Send the task now if the broker answers; False (logged) when it doesn't."""
        broker = outage_of(self.app.conf.broker_url)
        if broker.down():
            logger.info("broker unavailable: %s%s not sent; the periodic pass will do it", self.name, tuple(args))
            return False
        try:
            if options:
                self.apply_async(args, kwargs, **options)
            else:
                self.delay(*args, **kwargs)  # looked up on the instance, so tests can replace it
        except UNAVAILABLE as error:
            broker.failed(error)
            logger.warning("broker unavailable: %s%s not sent; the periodic pass will do it", self.name, tuple(args))
            return False
        return True
