"""The CLI shows amounts to the cent (`--json` keeps the API's full precision), and `starverse jobs` fits an
80-column terminal with each job on one line."""

from __future__ import annotations

import json

import httpx
import pytest
from rich.console import Console
from starverse import cli
from starverse.cli import common
from starverse.client import Client

JOB = {
    "id": 123456,
    "name": "llama-tiny-finetune-on-customer-support-transcripts-2025-q4-experiment-0042",
    "model": "meta-llama/Llama-2-70b-hf",
    "status": "stopped_no_credit",
    "step": 12345,
    "max_steps": 100000,
    "loss": 2.123456,
    "cost": "1234.567891",
    "created_at": "2026-12-06T02:18:25.123456Z",
}
PLAN = {
    "policy": "cost-performance",
    "model": "llama-tiny",
    "chip_counts": {"ascend-910b": {"on_demand": 16}},
    "tokens_per_s": 82_500.0,
    "price_per_hour": "26.800001",
    "eta_seconds": 10.0,
    "tokens_per_step": 256,
    "total_cost": "0.066231",
}
ANSWERS = {
    "/api/v1/jobs/": {"count": 1, "next": None, "results": [JOB]},
    "/api/v1/account/": {"username": "alice", "email": "a@example.com", "balance": "12.345678", "currency": "CNY"},
    "/api/v1/quotes/": PLAN,
    "/api/v1/usage/": {"group": "job", "total": "1234.567891", "rows": [{"key": 7, "label": "job 7", "seconds": 60,
                                                                          "amount": "0.004999"}]},
}  # fmt: skip


@pytest.fixture(autouse=True)
def canned_api(monkeypatch):
    """The CLI talks to canned answers, in an 80-column terminal."""
    monkeypatch.setenv("COLUMNS", "80")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=ANSWERS[request.url.path]))
    monkeypatch.setattr(common, "client", lambda: Client("http://sv.test", "sv_x", transport=transport))
    monkeypatch.setattr(common, "out", Console(highlight=False, soft_wrap=True, width=80))


def starverse(capsys, *args: str) -> str:
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


def test_jobs_fit_80_columns_one_line_a_job_with_the_cost_to_the_cent(capsys):
    out = starverse(capsys, "jobs")

    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    (row,) = [line for line in lines if "123456" in line and "stopped_no_credit" in line and "12345/100000" in line]
    assert "1,234.57" in row and "2.1235" in row, out


def test_jobs_json_keeps_the_exact_cost(capsys):
    assert json.loads(starverse(capsys, "jobs", "--json"))[0]["cost"] == "1234.567891"


def test_balance_quote_and_usage_show_amounts_to_the_cent(capsys):
    assert starverse(capsys, "balance").strip() == "alice: ¥12.35 (CNY)"

    plan = starverse(capsys, "quote")
    assert "¥26.80/h" in plan and "total       ¥0.07" in plan, plan

    usage = starverse(capsys, "usage")
    assert "Total ¥1,234.57" in usage and "<0.01" in usage, usage
