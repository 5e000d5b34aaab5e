"""An engine's answer passed back to the client: whole, or an SSE stream chunk by chunk as it comes; the
request counted in flight until it is answered, then recorded with its tokens and timings (`Tally`).

The record is written when the server closes the response, after the client has its answer: a whole answer
costs no query on its way out, and a stream is recorded when it ends or when the client goes.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime

from django.http import HttpResponse, StreamingHttpResponse
from rest_framework import status

from fleet.models import Deployment
from openai_api.errors import SERVER_ERROR, OpenAIError
from openai_api.gateway_proxy import Upstream, engine_failed, error_body
from workers.services import serving_load
from workers.services.deployments import record_request

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024  # a stream's unfinished line kept to look for usage in; a longer one is skipped


class Tally:
    """One request to a deployment: counted in flight once the engine has it (or it waits through a cold
    start) until `finish` (once), then recorded."""

    def __init__(self, deployment: Deployment, route: str, stream: bool, started_at: datetime, clock: float):
        self.deployment, self.route, self.stream = deployment, route, stream
        self.started_at, self.clock = started_at, clock  # the request's arrival: wall clock, perf_counter()
        self.replica_id: int | None = None
        self.status_code = status.HTTP_500_INTERNAL_SERVER_ERROR
        self.cold_start = False
        self.prompt_tokens = self.completion_tokens = 0
        self.first_byte_ms: float | None = None
        self.duration_ms: float | None = None
        self.finished = self.in_flight = False

    def count_in_flight(self) -> None:
        """Counted among the deployment's requests in flight (the autoscaler reads those), once."""
        if not self.in_flight:
            self.in_flight = True
            serving_load.request_started(self.deployment.pk)

    def ms(self) -> float:
        return (time.perf_counter() - self.clock) * 1000

    def first_byte(self) -> None:
        if self.first_byte_ms is None:
            self.first_byte_ms = self.ms()

    def count(self, usage) -> None:
        if isinstance(usage, dict):
            self.prompt_tokens = tokens(usage.get("prompt_tokens"))
            self.completion_tokens = tokens(usage.get("completion_tokens"))

    def finish(self) -> None:
        """Out of the in-flight count and into the records; never raises (it runs as the response closes)."""
        if self.finished:
            return
        self.finished = True
        if self.in_flight:
            serving_load.request_finished(self.deployment.pk)
        try:
            record_request(
                self.deployment,
                replica_id=self.replica_id,
                route=self.route,
                stream=self.stream,
                status_code=self.status_code,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=self.completion_tokens,
                started_at=self.started_at,
                first_byte_ms=self.first_byte_ms,
                duration_ms=self.duration_ms if self.duration_ms is not None else self.ms(),
                cold_start=self.cold_start,
            )
        except Exception:
            log.exception("request to deployment %s not recorded", self.deployment.pk)


def tokens(value) -> int:
    return value if type(value) is int and value > 0 else 0


def answer(upstream: Upstream, tally: Tally) -> HttpResponse | StreamingHttpResponse:
    """The response relaying `upstream`: a stream as it comes when the engine streams, else its whole body
    (an error body in OpenAI's shape)."""
    response = upstream.response
    tally.replica_id, tally.status_code = upstream.replica.job_id, response.status
    headers = {"X-Starverse-Replica": str(upstream.replica.job_id)}
    if upstream.replica.simulated:
        headers["X-Starverse-Simulated"] = "true"  # its speed says nothing about the chip it stands for
    content_type = response.getheader("Content-Type") or "application/json"
    if response.status < 300 and content_type.startswith("text/event-stream"):

        def closed() -> None:
            upstream.close()
            tally.finish()

        headers["Server-Timing"] = server_timing(upstream, tally)
        return RelayedStream(relay(upstream, tally), on_close=closed, headers=headers)
    tally.first_byte()
    body = read_whole(upstream)
    tally.duration_ms = tally.ms()
    headers["Server-Timing"] = server_timing(upstream, tally)
    if response.status < 300:
        tally.count(usage_of(body))
    else:
        body, content_type = error_body(response.status, body), "application/json"
    return RelayedResponse(
        body, status=response.status, content_type=content_type, headers=headers, on_close=tally.finish
    )


def server_timing(upstream: Upstream, tally: Tally) -> str:
    """The Server-Timing header: the gateway's own time, from the request's arrival until the engine had it
    (checks, the lookup, the connection), and the engine's since, to its whole answer (a stream: its headers)."""
    gateway_ms = (upstream.sent - tally.clock) * 1000
    engine_ms = (time.perf_counter() - upstream.sent) * 1000
    return f'gateway;dur={gateway_ms:.2f};desc="Starverse gateway", engine;dur={engine_ms:.2f};desc="model engine"'


def read_whole(upstream: Upstream) -> bytes:
    try:
        return upstream.response.read()
    except (OSError, http.client.HTTPException) as error:
        raise engine_failed(status.HTTP_502_BAD_GATEWAY, f"The model's replica broke off its answer: {error}") from None
    finally:
        upstream.close()


def usage_of(body: bytes) -> dict | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("usage") if isinstance(data, dict) else None


def relay(upstream: Upstream, tally: Tally) -> Iterator[bytes]:
    """The engine's stream, each chunk passed on unchanged as it arrives, its usage counted on the way. A
    stream the engine breaks off ends with an SSE error event (OpenAI's clients raise it) and is recorded 502."""
    scanner = UsageScanner()
    try:
        while chunk := upstream.response.read1(CHUNK_BYTES):
            tally.first_byte()
            scanner.feed(chunk)
            tally.count(scanner.usage)
            yield chunk
    except (OSError, http.client.HTTPException) as error:
        tally.status_code = status.HTTP_502_BAD_GATEWAY
        body = OpenAIError(f"The model's replica broke off the stream: {error}", kind=SERVER_ERROR).body()
        yield b"data: " + json.dumps(body).encode() + b"\n\n"
    tally.duration_ms = tally.ms()


class RelayedResponse(HttpResponse):
    """An engine's whole answer; `on_close` runs once the server has sent it."""

    def __init__(self, *args, on_close: Callable[[], None], **kwargs):
        super().__init__(*args, **kwargs)
        self.on_close = on_close

    def close(self) -> None:
        try:
            self.on_close()
        finally:
            super().close()


class RelayedStream(StreamingHttpResponse):
    """An engine's SSE stream; `on_close` runs when it ends or the client goes (the server closes it either way)."""

    def __init__(self, chunks: Iterator[bytes], *, on_close: Callable[[], None], headers: dict[str, str]):
        super().__init__(chunks, content_type="text/event-stream", headers=headers)
        self.on_close = on_close
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"  # a proxy in front (nginx) must pass each chunk on at once

    def close(self) -> None:
        try:
            self.on_close()
        finally:
            super().close()


class UsageScanner:
    """The `usage` of a passing SSE stream, read from its `data:` lines across chunk boundaries."""

    def __init__(self):
        self.tail = b""
        self.usage: dict | None = None

    def feed(self, chunk: bytes) -> None:
        lines = (self.tail + chunk).split(b"\n")
        self.tail = lines.pop()
        if len(self.tail) > MAX_LINE_BYTES:
            self.tail = b""
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line:
                self.read(line[5:])

    def read(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        usage = event.get("usage") if isinstance(event, dict) else None
        if isinstance(usage, dict):
            self.usage = usage
