"""The locust clients of bench/api_load.py: each reads its own account, jobs, chips, ledger and bids.

Run by bench/api_load.py as `locust -f bench/api_load_users.py --headless ...`, never on its own: the
tokens come from the JSON file named by API_LOAD_TOKENS (one per seeded user). A client asks as fast as it
is answered (no think time): what a client library polling its jobs does, and the worst case for the web
tier. Each request carries the next user's token in turn, so the load is spread over every seeded user:
one client at full speed would pass the per-user throttle (1200/min) and measure 429s; spread, every
request still goes through authentication and the throttle, and the token lookups rotate as 50 users' do.
"""

from __future__ import annotations

import itertools
import json
import os

from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser

TOKENS = json.loads(open(os.environ["API_LOAD_TOKENS"]).read())  # noqa: SIM115 - read once at import
_next_token = itertools.cycle(TOKENS)


class ApiReader(FastHttpUser):
    """A signed-in API client reading what a dashboard or the SDK reads, in equal shares."""

    wait_time = constant(0)

    def read(self, path: str) -> None:
        headers = {"Authorization": f"Bearer {next(_next_token)}", "Accept": "application/json"}
        with self.client.get(path, headers=headers, name=path, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {(response.text or '')[:200]}")

    @task
    def account(self) -> None:
        self.read("/api/v1/account/")

    @task
    def jobs(self) -> None:
        self.read("/api/v1/jobs/")

    @task
    def chips(self) -> None:
        self.read("/api/v1/chips/")

    @task
    def ledger(self) -> None:
        self.read("/api/v1/ledger/")

    @task
    def bids(self) -> None:
        self.read("/api/v1/bids/")
