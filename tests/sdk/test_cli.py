"""The `starverse` CLI against a live server: login, tables and --json, bids, and its exit codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.utils import timezone
from starverse import cli
from starverse.cli import common
from starverse.client import Client
from starverse.config import config_path

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.accounts import PASSWORD
from tests.support.two_factor import recovery_code, turn_on_totp
from workers.models import JobLogLine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("STARVERSE_URL", raising=False)
    monkeypatch.delenv("STARVERSE_API_KEY", raising=False)
    monkeypatch.delenv("STARVERSE_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def as_user(monkeypatch, live_server, token_for):
    """Point the CLI at the live server with a token of this user, through the environment."""

    def login(user, **kwargs) -> None:
        monkeypatch.setenv("STARVERSE_URL", live_server.url)
        monkeypatch.setenv("STARVERSE_API_KEY", token_for(user, **kwargs))

    return login


def starverse(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_cli(*args: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed console script in a process of its own (what a user's shell runs)."""
    command = [str(Path(sys.executable).with_name("starverse")), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60, env=env)


# -- login and configuration -----------------------------------------------------------------------


def test_login_with_a_password_saves_a_token_only_its_owner_can_read(live_server, alice, tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    done = run_cli("login", "--url", live_server.url, stdin=f"alice\n{PASSWORD}\n", env=env)

    assert done.returncode == 0, done.stderr
    path = tmp_path / "xdg" / "starverse" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f'url = "{live_server.url}"' in path.read_text()
    balance = run_cli("balance", "--json", env=env)
    assert balance.returncode == 0, balance.stderr
    assert json.loads(balance.stdout)["username"] == "alice"


def test_login_with_a_wrong_password_exits_3_without_a_traceback(live_server, alice, tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    done = run_cli("login", "--url", live_server.url, "--username", "alice", stdin="wrong\n", env=env)

    assert done.returncode == 3
    assert "Invalid username or password" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "xdg" / "starverse" / "config.toml").exists()


def test_login_asks_for_the_two_factor_code_when_the_account_has_one(live_server, alice, tmp_path):
    turn_on_totp(alice)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    done = run_cli("login", "--url", live_server.url, stdin=f"alice\n{PASSWORD}\n{recovery_code(alice)}\n", env=env)

    assert done.returncode == 0, done.stderr
    assert "Two-factor code" in done.stdout
    assert json.loads(run_cli("balance", "--json", env=env).stdout)["username"] == "alice"


def test_login_with_a_token_checks_it_and_saves_it(capsys, live_server, token_for, alice):
    code, out, _ = starverse(capsys, "login", "--url", live_server.url, "--token", token_for(alice))

    assert code == 0 and "as alice" in out
    assert "token = " in config_path().read_text()


def test_no_configuration_is_a_clear_message_and_exit_2(tmp_path):
    done = run_cli("jobs", env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "empty")})

    assert done.returncode == 2
    assert "STARVERSE_URL" in done.stderr and "starverse login" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_wrong_token_exits_3(capsys, monkeypatch, live_server):
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", "sv_wrong")

    code, _, err = starverse(capsys, "balance")

    assert code == 3 and "Invalid API token" in err


def test_an_unknown_option_is_a_usage_error(capsys):
    code, _, err = starverse(capsys, "jobs", "--colour", "red")
    assert code == 2 and "--colour" in err


# -- commands --------------------------------------------------------------------------------------


def test_chips_prints_a_table_for_people_and_json_for_scripts(capsys, live_server, monkeypatch, catalog):
    monkeypatch.setenv("STARVERSE_URL", live_server.url)  # chips need no token

    code, table, _ = starverse(capsys, "chips")
    assert code == 0 and "rtx-4090" in table and "on-demand ¥/h" in table

    code, out, _ = starverse(capsys, "chips", "--json")
    assert code == 0 and "tpu-v5e" in {chip["slug"] for chip in json.loads(out)}


def test_balance_and_usage(capsys, as_user, alice, fund):
    fund(alice, "12.5")
    as_user(alice)

    assert starverse(capsys, "balance")[1].strip() == "alice: ¥12.50 (CNY)"
    code, out, _ = starverse(capsys, "usage", "--group", "day", "--json")
    assert code == 0 and json.loads(out)["total"] == "0.00"


def test_quote_prints_the_plan(capsys, as_user, alice, small_fleet):
    as_user(alice)

    code, out, _ = starverse(capsys, "quote", "--model", "llama-tiny", "--max-budget", "28", "--max-steps", "100")

    assert code == 0
    assert "tokens/s" in out and "ETA" in out and "¥" in out


def test_run_without_credit_exits_4(capsys, as_user, alice, small_fleet):
    as_user(alice)

    code, _, err = starverse(capsys, "run", "--max-steps", "50")

    assert code == 4 and "balance" in err.lower()
    assert not Job.objects.exists()


def test_run_with_a_read_only_token_exits_3(capsys, as_user, alice, fund, small_fleet):
    fund(alice)
    as_user(alice, scope="read_only")

    code, _, err = starverse(capsys, "run", "--max-steps", "50", "--no-follow")

    assert code == 3 and "read-only" in err


def test_bad_input_names_the_field_and_exits_1(capsys, as_user, alice, small_fleet):
    as_user(alice)

    code, _, err = starverse(capsys, "quote", "--model", "gpt-17")

    assert code == 1 and "model" in err and "gpt-17" in err


def test_a_bad_number_is_a_usage_error_before_any_request(capsys, as_user, alice):
    as_user(alice)
    code, _, err = starverse(capsys, "quote", "--max-budget", "lots")
    assert code == 2 and "--max-budget" in err


def test_run_no_follow_then_jobs_logs_and_cancel(capsys, as_user, alice, fund, small_fleet, no_celery):
    fund(alice)
    as_user(alice)

    code, out, _ = starverse(capsys, "run", "--max-steps", "50", "--name", "cli-run", "--no-follow", "--json")
    assert code == 0
    job_id = json.loads(out)["id"]
    JobLogLine.objects.create(job_id=job_id, epoch=1, rank=0, line="step 1 loss 5.0", created_at=timezone.now())

    code, table, _ = starverse(capsys, "jobs")
    assert code == 0 and "cli-run" in table and str(job_id) in table
    code, logs, _ = starverse(capsys, "logs", str(job_id))
    assert code == 0 and "[rank 0] step 1 loss 5.0" in logs
    code, out, _ = starverse(capsys, "cancel", str(job_id), "--json")
    assert code == 0 and json.loads(out)["status"] == JobStatus.CANCELLED


def test_logs_follow_stops_when_the_job_has_ended(capsys, as_user, alice, fund, small_fleet, no_celery):
    fund(alice)
    as_user(alice)
    job_id = json.loads(starverse(capsys, "run", "--no-follow", "--json")[1])["id"]
    now = timezone.now()
    JobLogLine.objects.bulk_create(
        [JobLogLine(job_id=job_id, epoch=1, rank=r, line=f"line {i}", created_at=now) for i in range(3) for r in (0, 1)]
    )
    Job.objects.filter(pk=job_id).update(status=JobStatus.SUCCEEDED)

    code, out, _ = starverse(capsys, "logs", "-f", str(job_id))

    assert code == 0 and out.count("line ") == 6


def test_another_users_job_is_not_found(capsys, as_user, alice, bob, fund, small_fleet, no_celery):
    fund(alice)
    as_user(alice)
    job_id = json.loads(starverse(capsys, "run", "--no-follow", "--json")[1])["id"]
    as_user(bob)

    code, _, err = starverse(capsys, "cancel", str(job_id))

    assert code == 1 and "NotFound" in err
    assert Job.objects.get(pk=job_id).cancel_requested_at is None


# -- bids (the CLI side of the bids contract) ------------------------------------------------------


class FakeBids:
    """The bids endpoints as the contract describes them, to drive the CLI's bid commands."""

    def __init__(self):
        self.bids: dict[int, dict] = {}
        self.requests: list[tuple[str, str, dict]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path.removeprefix("/api/v1/bids/").strip("/")
        if request.method == "POST" and not path:
            bid = {**body, "id": len(self.bids) + 1, "status": "active", "won_chips": 0, "clearing_price": None}
            self.bids[bid["id"]] = bid
            return httpx.Response(201, json=bid)
        if request.method == "GET" and not path:
            return httpx.Response(
                200, json={"count": len(self.bids), "next": None, "results": list(self.bids.values())}
            )
        bid_id, _, verb = path.partition("/")
        bid = self.bids[int(bid_id)]
        if request.method == "PATCH":
            bid.update(body)
        elif verb == "cancel":
            bid["status"] = "cancelled"
        return httpx.Response(200, json=bid)


def test_bid_create_list_raise_and_cancel(capsys, monkeypatch):
    fake = FakeBids()
    monkeypatch.setattr(common, "client", lambda: Client("http://sv.test", "sv_x", transport=httpx.MockTransport(fake)))

    code, out, _ = starverse(
        capsys, "bid", "create", "--job", "7", "--chip", "tpu-v5e", "--chips", "2", "--max-price", "3.5"
    )
    assert code == 0 and "tpu-v5e" in out and "3.5" in out
    assert fake.requests[0][2] == {"job": 7, "chip": "tpu-v5e", "chips": 2, "max_price": "3.5"}

    assert starverse(capsys, "bid", "raise", "1", "--max-price", "4.25")[0] == 0
    assert fake.requests[-1][:2] == ("PATCH", "/api/v1/bids/1/") and fake.requests[-1][2] == {"max_price": "4.25"}

    code, out, _ = starverse(capsys, "bid", "list", "--json")
    assert code == 0 and json.loads(out)[0]["max_price"] == "4.25"

    code, out, _ = starverse(capsys, "bid", "cancel", "1", "--json")
    assert code == 0 and json.loads(out)["status"] == "cancelled"
