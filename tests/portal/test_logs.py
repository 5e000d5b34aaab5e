"""Structured logs: JSON lines with the request id in production, job and node ids where work is done."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import request_finished
from django.db import close_old_connections
from django.http import HttpResponse

from portal.celery import app as celery_app
from portal.logs import CONSOLE, JSON, RequestIdMiddleware, log_format, logging_config


@pytest.fixture
def log_lines():
    """What the root logger writes, through the formatter the settings configured; parsed as JSON lines."""
    root = logging.getLogger()
    configured = next(
        handler for handler in root.handlers if isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(configured.formatter)
    root.addHandler(handler)
    level = logging.getLogger("portal.request").level
    logging.getLogger("portal.request").setLevel(logging.DEBUG)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    finally:
        root.removeHandler(handler)
        logging.getLogger("portal.request").setLevel(level)


def test_production_logs_json_and_debug_or_the_variable_choose_the_console():
    assert log_format("", debug=False) == JSON
    assert log_format("", debug=True) == CONSOLE
    assert log_format("console", debug=False) == CONSOLE
    assert log_format("JSON", debug=True) == JSON
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT='xml'"):
        log_format("xml", debug=False)


def test_the_test_run_is_configured_like_production(settings):
    assert (settings.DEBUG, settings.LOG_FORMAT) == (False, JSON)


@pytest.mark.django_db
def test_a_request_logs_a_json_line_with_its_request_id(client, log_lines):
    response = client.get("/healthz")
    request_id = response["X-Request-ID"]
    assert len(request_id) == 32
    line = next(line for line in log_lines() if line.get("event") == "request")
    assert line["request_id"] == request_id
    assert (line["method"], line["path"], line["status"]) == ("GET", "/healthz", 200)
    assert {"timestamp", "level", "logger"} <= line.keys()


def test_the_request_line_is_written_once_the_response_is_sent_with_what_the_request_bound(rf, log_lines):
    def view(request):
        structlog.contextvars.bind_contextvars(node_id=7)
        return HttpResponse("ok", status=201)

    response = RequestIdMiddleware(view)(rf.post("/api/v1/agent/poll/"))
    assert [line for line in log_lines() if line.get("event") == "request"] == []  # not while it is being sent
    assert structlog.contextvars.get_contextvars() == {}

    request_finished.disconnect(close_old_connections)  # as the test client does: no database here
    try:
        response.close()  # the server has sent it
    finally:
        request_finished.connect(close_old_connections)
    [line] = [line for line in log_lines() if line.get("event") == "request"]
    assert (line["path"], line["status"], line["node_id"]) == ("/api/v1/agent/poll/", 201, 7)
    assert line["request_id"] == response["X-Request-ID"]
    assert structlog.contextvars.get_contextvars() == {}


@pytest.mark.django_db
def test_an_incoming_request_id_is_kept_and_a_strange_one_replaced(client):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="lb-4f2a-77")["X-Request-ID"] == "lb-4f2a-77"
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="<script>" + "x" * 300)["X-Request-ID"]
    assert replaced != "<script>" and len(replaced) == 32


def test_plain_stdlib_loggers_carry_the_bound_ids_too(log_lines):
    with structlog.contextvars.bound_contextvars(request_id="trace-1", node_id=7):
        logging.getLogger("billing.somewhere").warning("balance low for %s", "alice")
    line = next(line for line in log_lines() if line.get("logger") == "billing.somewhere")
    assert (line["event"], line["level"], line["request_id"], line["node_id"]) == (
        "balance low for alice",
        "warning",
        "trace-1",
        7,
    )


def test_the_console_format_is_readable_text_not_json():
    config = logging_config(CONSOLE, "INFO")
    formatter = config["formatters"]["structured"]["()"](
        **{k: v for k, v in config["formatters"]["structured"].items() if k != "()"}
    )
    record = logging.LogRecord("portal.x", logging.INFO, __file__, 1, "node %s is back", ("gpu-7",), None)
    text = formatter.format(record)
    assert "node gpu-7 is back" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    logging_config(JSON, "INFO")  # as the settings left it


@celery_app.task(name="tests.portal.log_about_a_job")
def log_about_a_job(job_id: int, note: str = "") -> None:
    logging.getLogger("workers.services.somewhere").info("working on it %s", note)


def test_a_task_binds_its_name_and_the_job_it_works_on(log_lines):
    log_about_a_job(41, note="now")
    log_about_a_job.apply(kwargs={"job_id": 42})
    lines = [line for line in log_lines() if line.get("event", "").startswith("working on it")]
    assert [(line["job_id"], line["task"]) for line in lines] == [
        (41, "tests.portal.log_about_a_job"),
        (42, "tests.portal.log_about_a_job"),
    ]
    assert lines[1]["task_id"]
    assert "job_id" not in structlog.contextvars.get_contextvars()  # unbound once the task is done


@pytest.mark.django_db
def test_agent_polls_and_reports_name_their_node_and_job(enroll, agent_api, log_lines):  # noqa: F811
    node, token = enroll("gpu-host-1")
    api = agent_api(token)
    api.post("/api/v1/agent/poll/", {"wait_s": 0}, format="json")
    log_item = {"kind": "log", "rank": 0, "line": "step 1"}
    api.post("/api/v1/agent/report/", {"job_id": 999, "epoch": 1, "items": [log_item]}, format="json")
    requests = [line for line in log_lines() if line.get("event") == "request"]
    poll = next(line for line in requests if line["path"] == "/api/v1/agent/poll/")
    report = next(line for line in requests if line["path"] == "/api/v1/agent/report/")
    assert poll["node_id"] == node.pk and "job_id" not in poll
    assert (report["node_id"], report["job_id"], report["epoch"]) == (node.pk, 999, 1)


def _record(name: str, level: int, error: Exception) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        import sys

        return logging.LogRecord(name, level, __file__, 1, "Health check %r failed", ("meter",), sys.exc_info())


def test_a_failed_readiness_check_logs_its_reason_without_a_traceback():
    from health_check.exceptions import ServiceUnavailable

    from portal.logs import ExpectedHealthFailures

    record = _record("health_check.base", logging.WARNING, ServiceUnavailable("meter: no run recorded"))
    assert ExpectedHealthFailures().filter(record)
    assert record.exc_info is None
    assert record.getMessage() == "Health check 'meter' failed: Unavailable: meter: no run recorded"
    crash = _record("health_check.base", logging.ERROR, RuntimeError("bug"))
    assert ExpectedHealthFailures().filter(crash) and crash.exc_info is not None  # a real crash keeps it
    configured = logging.getLogger().handlers
    assert any(isinstance(f, ExpectedHealthFailures) for h in configured for f in h.filters)
