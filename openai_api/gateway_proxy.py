"""The gateway's side that talks to engines: one new HTTP connection per request, another replica tried
while none has answered a byte, and engines' error bodies reshaped into OpenAI's (docs/SERVING.md).

A connection is never kept for the next request: a draining replica waits until no connection to its engine
is left open (hosts/serving/replica.py), so a pooled idle one would hold its drain for nothing.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

from rest_framework import status

from openai_api.errors import INVALID_REQUEST, SERVER_ERROR, OpenAIError
from workers.services.replicas import Replica

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
# The longest wait for an engine's answer, or between two chunks of a stream: a long generation on a CPU.
READ_TIMEOUT_S = 600.0


@dataclass
class Upstream:
    """One request's open connection to the replica that answered it."""

    replica: Replica
    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    sent: float  # perf_counter() once the engine had the whole request

    def close(self) -> None:
        self.connection.close()


def open_upstream(
    replicas: list[Replica], route: str, payload: bytes, meanwhile: Callable[[], None] | None = None
) -> Upstream:
    """Send the request to a ready replica (in random order), trying the next while none has answered a byte:
    a refused or failed connection, or one closed before the status line. Once the engine has the request and
    is silent past READ_TIMEOUT_S, or has answered anything, no other replica is tried (it may be working).
    `meanwhile` runs once, as soon as an engine has the whole request, before its answer is awaited."""
    for replica in in_random_order(replicas):
        connection = connection_to(replica)
        try:
            connection.connect()
            connection.sock.settimeout(READ_TIMEOUT_S)
        except OSError as error:
            connection.close()
            log.warning("replica %s: no connection: %s", replica.job_id, error)
            continue
        try:
            connection.request("POST", engine_path(replica, route), body=payload, headers=JSON_HEADERS)
            sent = time.perf_counter()
            if meanwhile is not None:
                meanwhile, then = None, meanwhile
                then()
            return Upstream(replica, connection, connection.getresponse(), sent)
        except TimeoutError:
            connection.close()
            raise engine_failed(
                status.HTTP_504_GATEWAY_TIMEOUT, "The model's replica did not answer in time."
            ) from None
        except OSError as error:  # RemoteDisconnected included: nothing of an answer came, try the next
            connection.close()
            log.warning("replica %s failed before answering: %s", replica.job_id, error)
        except http.client.HTTPException as error:
            connection.close()
            raise engine_failed(status.HTTP_502_BAD_GATEWAY, f"The model's replica answered garbage: {error}") from None
        except BaseException:  # `meanwhile` failed (the database): the connection goes with the request
            connection.close()
            raise
    raise engine_failed(
        status.HTTP_502_BAD_GATEWAY,
        "No replica of this model could be reached; try again shortly.",
        "replica_unreachable",
    )


def in_random_order(replicas: list[Replica]) -> list[Replica]:
    return random.sample(replicas, len(replicas))


def engine_failed(status_code: int, message: str, code: str | None = None) -> OpenAIError:
    return OpenAIError(message, code=code, status_code=status_code, kind=SERVER_ERROR)


JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def connection_to(replica: Replica) -> http.client.HTTPConnection:
    """A new connection (made by connect()) that gives up connecting after CONNECT_TIMEOUT_S."""
    url = urlsplit(replica.url)
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return kind(url.hostname, url.port, timeout=CONNECT_TIMEOUT_S)


def engine_path(replica: Replica, route: str) -> str:
    return urlsplit(replica.url).path.rstrip("/") + route


def error_body(status_code: int, body: bytes) -> bytes:
    """An engine's error answer in OpenAI's shape: kept when it is already, else its message rewrapped
    (`transformers serve` answers {"detail": "..."}, FastAPI's validation a list of {"loc", "msg"})."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return body
    message, param = detail_of(data)
    message = message or body.decode("utf-8", "replace").strip()[:1000] or HTTPStatus(status_code).phrase
    kind = INVALID_REQUEST if status_code < 500 else SERVER_ERROR
    return json.dumps(OpenAIError(message, param=param, status_code=status_code, kind=kind).body()).encode()


def detail_of(data) -> tuple[str, str | None]:
    """The message and parameter of a non-OpenAI error body."""
    if not isinstance(data, dict):
        return "", None
    detail = data.get("detail", data.get("error", data.get("message")))
    if isinstance(detail, list) and detail:
        items = [item for item in detail if isinstance(item, dict)]
        message = "; ".join(str(item.get("msg", item)) for item in items) or str(detail)
        loc = items[0].get("loc") if items else None
        return message, str(loc[-1]) if isinstance(loc, list | tuple) and loc else None
    return ("" if detail is None else str(detail)), None
