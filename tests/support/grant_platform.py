"""A stand-in for the platform's storage endpoint (kernel/protocol.py, section 4), for ranks run without
Django: it signs URLs for any key under its prefix with the grant it was made with, and counts what it
signed. What the real platform refuses is tested against the real one (tests/workers/services/test_storage_grants.py);
here ranks show they stage, checkpoint and convert with nothing but a grant."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kernel.protocol import STORAGE_PATH
from kernel.storage import Store

GRANT = "svg_runtime-test"


class GrantPlatform:
    """`with GrantPlatform(store, prefix) as platform:` serves at `platform.url` until the block ends."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store, self.prefix = store, prefix
        self.signed: Counter[str] = Counter()  # "GET"/"PUT" -> keys signed
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> GrantPlatform:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, authorization: str, body: dict) -> tuple[int, dict]:
        if authorization != f"Bearer {GRANT}":
            return 401, {"detail": "no grant", "code": "not_a_grant"}
        outside = [key for key in body["keys"] if not key.startswith(self.prefix + "/")]
        if outside:
            return 403, {"detail": "outside the grant", "code": "outside_grant", "errors": {"keys": outside}}
        self.signed[body["method"]] += len(body["keys"])
        urls = {key: self.store.grant_url(key, body["method"], 300) for key in body["keys"]}
        return 200, {"urls": urls, "uploads": {}, "expires_in": 300}

    def _handler(self):
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = (
                    platform.answer(self.headers.get("Authorization", ""), body)
                    if self.path == STORAGE_PATH
                    else (404, {"detail": "not found"})
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        return Handler
