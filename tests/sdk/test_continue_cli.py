"""`Client.continue_job`, `Run.continue_` and `starverse continue JOB [--steps N] [--checkpoint STEP]` (#31): each
posts to /jobs/{id}/continue/ only the options given (with an idempotency key) and answers the new job."""

from __future__ import annotations

import json

import httpx
import pytest
from starverse import cli
from starverse.cli import common
from starverse.client import Client
from starverse.training import Run


class FakeContinue:
    """POST /api/v1/jobs/{id}/continue/ as the contract describes it."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.requests.append((request.method, request.url.path, body, request.headers.get("Idempotency-Key")))
        old = int(request.url.path.split("/")[-3])
        start = body.get("checkpoint_step", 40)
        total = body.get("max_steps") or start + body.get("additional_steps", 60)
        new = {"id": old + 1, "status": "queued", "continued_from": old, "start_checkpoint_step": start}
        return httpx.Response(201, json={**new, "max_steps": total, "step": start, "name": "", "model": "llama-tiny"})


@pytest.fixture
def fake(monkeypatch) -> FakeContinue:
    fake = FakeContinue()
    client = Client("http://sv.test", "sv_x", transport=httpx.MockTransport(fake))
    monkeypatch.setattr(common, "client", lambda: client)
    return fake


def test_the_client_sends_only_what_is_given_with_an_idempotency_key(fake):
    client = common.client()

    new = client.continue_job(7, checkpoint_step=20, additional_steps=100, max_budget="12.5")

    method, path, body, key = fake.requests[-1]
    assert (method, path) == ("POST", "/api/v1/jobs/7/continue/")
    assert body == {"checkpoint_step": 20, "additional_steps": 100, "max_budget": "12.5"} and key
    assert (new["id"], new["continued_from"], new["max_steps"]) == (8, 7, 120)


def test_a_run_continues_as_a_new_run(fake):
    old = Run(common.client(), {"id": 7, "status": "succeeded"})

    new = old.continue_(max_steps=500)

    assert isinstance(new, Run) and new.id == 8 and new.data["continued_from"] == 7
    assert fake.requests[-1][2] == {"max_steps": 500}


def test_the_cli_continues_a_job(capsys, fake):
    code = cli.main(["continue", "7", "--steps", "50", "--checkpoint", "30"])
    out = capsys.readouterr().out

    assert code == 0, out
    assert fake.requests[-1][2] == {"checkpoint_step": 30, "additional_steps": 50}
    assert "Job 8 continues job 7 from step 30 to step 80: queued" in out

    assert cli.main(["continue", "7", "--max-steps", "400", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_steps"] == 400
    assert fake.requests[-1][2] == {"max_steps": 400}
