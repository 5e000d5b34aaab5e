"""HTTP client for the platform's agent API (kernel/protocol.py, section "Platform <-> agent").

Errors are sorted into the few cases the agent acts on differently: the token was refused
(enroll again), the epoch is stale (stop those ranks), the request is wrong (drop it), and
everything else is transient (back off and retry: the platform may be restarting).
"""

from __future__ import annotations

import random
import threading

import httpx

from kernel.protocol import AGENT_API_PREFIX


class PlatformError(Exception):
    """Base of the errors below; `status` is the HTTP status, or None for network failures."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Transient(PlatformError):
    """Network failure, timeout or 5xx: retry later."""


class Unauthorized(PlatformError):
    """401/403: the node token (or the enrollment token) is not accepted."""


class StaleEpoch(PlatformError):
    """409 on a report: the job moved on to a newer epoch."""


class Rejected(PlatformError):
    """Any other 4xx: retrying the same request won't help."""


class PlatformClient:
    """One httpx client per instance; use one instance per thread that talks to the platform."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def enroll(self, body: dict) -> dict:
        return self._post("/enroll/", body, token=None)

    def poll(self, token: str, body: dict) -> dict:
        """Long-poll: the read timeout must outlast the wait the platform was asked to hold."""
        timeout = httpx.Timeout(10.0, read=float(body.get("wait_s", 0)) + 15.0)
        return self._post("/poll/", body, token=token, timeout=timeout)

    def report(self, token: str, body: dict) -> dict:
        return self._post("/report/", body, token=token)

    def _post(self, path: str, body: dict, token: str | None, timeout=None) -> dict:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        kwargs = {"timeout": timeout} if timeout is not None else {}
        try:
            response = self._http.post(AGENT_API_PREFIX + path, json=body, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise Transient(f"{path}: {type(exc).__name__}: {exc}") from exc
        return _decode(path, response)


def _decode(path: str, response: httpx.Response) -> dict:
    status = response.status_code
    if 200 <= status < 300:
        try:
            return response.json()
        except ValueError as exc:
            raise Transient(f"{path}: {status} with a body that is not JSON", status) from exc
    detail = response.text[:300]
    if status in (401, 403):
        raise Unauthorized(f"{path}: {status} {detail}", status)
    if status == 409:
        raise StaleEpoch(f"{path}: {status} {detail}", status)
    if status in (408, 429) or status >= 500:
        raise Transient(f"{path}: {status} {detail}", status)
    raise Rejected(f"{path}: {status} {detail}", status)


class Backoff:
    """0.5 s doubling to 5 s, each sleep jittered to 50-100 % so restarted agents don't stampede."""

    def __init__(self, first_s: float = 0.5, cap_s: float = 5.0) -> None:
        self.first_s, self.cap_s = first_s, cap_s
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.first_s * 2**self.failures)
        self.failures += 1
        return delay * random.uniform(0.5, 1.0)

    def wait(self, stop: threading.Event) -> bool:
        """Sleep the next delay; True if `stop` was set meanwhile."""
        return stop.wait(self.next_delay())

    def reset(self) -> None:
        self.failures = 0
