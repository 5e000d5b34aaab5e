"""Structured logs: one JSON object per line in production, a readable line locally (structlog over stdlib logging).

Every record, whether logged through structlog or a plain `logging.getLogger`, carries what is
bound in the context: `request_id` for a web request (RequestIdMiddleware), `node_id` and `job_id`
where the agent API handles a node or a job (workers/api/agent_views.py), and `task`, `task_id`
and the job or node a Celery task works on (portal/task_base.py).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

JSON, CONSOLE = "json", "console"
REQUEST_ID_HEADER = "X-Request-ID"
# An incoming id is kept when it is short and plain (a proxy's or a client's); anything else is replaced.
GOOD_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
# Probes hit these every few seconds: their request lines are DEBUG, not INFO.
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

request_logger = structlog.get_logger("portal.request")


def log_format(chosen: str, debug: bool) -> str:
    """LOG_FORMAT when set (json or console), else console under DEBUG and JSON otherwise."""
    chosen = chosen.strip().lower()
    if chosen in (JSON, CONSOLE):
        return chosen
    if chosen:
        raise ImproperlyConfigured(f"LOG_FORMAT={chosen!r}: use 'json' or 'console'.")
    return CONSOLE if debug else JSON


def shared_processors() -> list[Callable[..., Any]]:
    """What every record gets, from structlog or from stdlib logging: context, logger, level, time."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def logging_config(fmt: str, level: str) -> dict[str, Any]:
    """Configure structlog and return Django's LOGGING: one stderr handler in `fmt` for the root logger."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    renderer: Any
    if fmt == JSON:
        renderer = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=False)]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structured": {
                "()": structlog.stdlib.ProcessorFormatter,
                "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
                "foreign_pre_chain": shared_processors(),
            }
        },
        "filters": {"expected_health_failures": {"()": ExpectedHealthFailures}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "structured",
                "filters": ["expected_health_failures"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }


class ExpectedHealthFailures(logging.Filter):
    """A readiness check that finds a store down is an answer, not a crash: django-health-check logs it
    with its traceback; keep the line and the reason, drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("health_check") and record.exc_info and record.levelno < logging.ERROR:
            error = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}: {error}", ()
            record.exc_info = record.exc_text = None
        return True


def request_id_of(request: HttpRequest) -> str:
    """The caller's X-Request-ID when it is a plain token, else a new one."""
    given = request.headers.get(REQUEST_ID_HEADER, "").strip()
    return given if GOOD_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Binds a request id to every log line of the request, echoes it as X-Request-ID, logs one line per request
    once its response has been sent: a formatted record and a write to stderr that no caller need wait for
    (py-spy put it at 8.5% of a gateway worker's samples inside Django on the 2-core machine)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        structlog.contextvars.clear_contextvars()
        request.request_id = request_id_of(request)
        structlog.contextvars.bind_contextvars(request_id=request.request_id)
        request.clock = started = time.perf_counter()  # its arrival (the gateway times itself from here)
        try:
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = request.request_id
            line = {
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),  # until its headers (a stream)
            }
            level = logging.DEBUG if request.path in QUIET_PATHS else logging.INFO
            after_sent(response, partial(log_request, level, structlog.contextvars.get_contextvars(), line))
            return response
        finally:  # what the request bound (its node, its job) must not stay on the thread after it
            structlog.contextvars.clear_contextvars()


def log_request(level: int, context: dict[str, Any], line: dict[str, Any]) -> None:
    """The request's line, with what the request had bound (its id, its node, its job)."""
    with structlog.contextvars.bound_contextvars(**context):
        request_logger.log(level, "request", **line)


def after_sent(response: HttpResponse, action: Callable[[], None]) -> None:
    """Run `action` when the server closes the response, once it has sent it (WSGI and ASGI servers, and the test
    client, all close it). Django has no public hook for this; its own FileResponse closes its file through the
    same list of closers. An exception `action` raises is dropped there, as Django drops a closer's."""
    response._resource_closers.append(action)
