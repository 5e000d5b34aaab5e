"""A fake Starverse platform for the agent tests: enroll, poll, report per kernel/protocol.py.

An http.server in a thread. Commands stay pending (and are re-sent on every poll) until acked,
like the real platform; polls are held up to wait_s unless a command is pending. It can be
stopped and started again on the same port to play a platform restart.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENROLLMENT_TOKEN = "sve_test-pool"


class FakePlatform:
    def __init__(self) -> None:
        self.port = 0
        self.tokens: dict[str, str] = {}  # node token -> hostname
        self.enrollments: list[dict] = []
        self.polls: list[dict] = []
        self.reports: list[dict] = []
        self.pending: list[dict] = []
        self.acks: dict = {}  # command id -> error (None when done)
        self.report_status: Callable[[dict], int] = lambda body: 200
        self.poll_timeout_s = 25
        self.hold_polls = True  # False: answer at once, like a platform that ignores wait_s
        self.failing_polls = 0  # answer this many polls with a 500
        self.seen_address: str | None = None  # play a platform that sees agents at this address (else the peer's)
        self.cond = threading.Condition()
        self.stopping = False
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.stopping = False
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        """Go away like a dying process: held polls are cut, the port is closed."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def release(self) -> None:
        """Answer every held poll now (lets a stopping agent leave its long-poll)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        time.sleep(0.05)
        with self.cond:
            self.stopping = False

    def send(self, type_: str, job_id: int, epoch: int, payload: dict, command_id=None) -> int:
        command_id = command_id or next(self._ids) + 1000
        with self.cond:
            self.pending.append({"id": command_id, "type": type_, "job_id": job_id, "epoch": epoch, "payload": payload})
            self.cond.notify_all()
        return command_id

    def revoke(self, token: str) -> None:
        with self.cond:
            self.tokens.pop(token, None)

    def items(self, kind: str | None = None, job_id: int | None = None, epoch: int | None = None) -> list:
        with self.cond:
            reports = list(self.reports)
        return [
            item
            for body in reports
            for item in body["items"]
            if (kind is None or item["kind"] == kind)
            and (job_id is None or body["job_id"] == job_id)
            and (epoch is None or body["epoch"] == epoch)
        ]

    # -- handlers (called from the server's threads) --------------------------------------------
    def enroll(self, body: dict, peer: str = "127.0.0.1") -> tuple[int, dict]:
        renewal = self.tokens.get(body.get("node_token", "")) == body["hostname"]  # the host's current token
        if body.get("enrollment_token") != ENROLLMENT_TOKEN and not renewal:
            return 403, {"detail": "bad enrollment token", "code": "enrollment_token_invalid"}
        token = f"svn_{len(self.enrollments) + 1}-{body['hostname']}"
        with self.cond:
            self.tokens = {t: h for t, h in self.tokens.items() if h != body["hostname"]}
            self.tokens[token] = body["hostname"]
            self.enrollments.append(body)
        declared = body.get("address") not in (None, "", "auto")
        return 201, {
            "address": body["address"] if declared else (self.seen_address or peer),
            "address_source": "declared" if declared else "observed",
            "node_id": len(self.enrollments),
            "node_token": token,
            "pool": "test-pool",
            "chip_type": body["chip_type"],
            "poll_timeout_s": self.poll_timeout_s,
            "heartbeat_deadline_s": 60,
        }

    def poll(self, body: dict) -> tuple[int, dict]:
        deadline = time.monotonic() + (float(body.get("wait_s", 0)) if self.hold_polls else 0)
        with self.cond:
            self.polls.append(body)
            if self.failing_polls > 0:
                self.failing_polls -= 1
                return 500, {"detail": "boom"}
            acked = set(body.get("acks", []))
            errors = {a["id"]: a["error"] for a in body.get("ack_errors", [])}
            self.acks.update({i: errors.get(i) for i in acked})
            self.pending = [c for c in self.pending if c["id"] not in acked]
            while not self.pending and not self.stopping and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            if self.stopping and not self.pending:
                return 503, {"detail": "shutting down"}
            answer = {"commands": list(self.pending), "server_time": time.time()}
            if self.seen_address:
                answer["address"] = self.seen_address
            return 200, answer

    def report(self, body: dict) -> tuple[int, dict]:
        status = self.report_status(body)
        if status != 200:
            return status, {"detail": "stale epoch"}
        with self.cond:
            self.reports.append(body)
        return 200, {"accepted": len(body["items"])}


def _handler(platform: FakePlatform) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            route = self.path.removeprefix("/api/v1/agent/").strip("/")
            if route == "enroll":
                status, answer = platform.enroll(body, self.client_address[0])
            elif self.headers.get("Authorization", "").removeprefix("Bearer ") not in platform.tokens:
                status, answer = 401, {"detail": "bad node token"}
            elif route in ("poll", "report"):
                status, answer = getattr(platform, route)(body)
            else:
                status, answer = 404, {"detail": "not found"}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    return Handler
