"""Quote error benchmark: how far quoted ETA and cost are from what runs really take and cost.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/5 \\
        .venv/bin/python bench/quote_error.py [--jobs 8]

Starts the platform the way `make run` does (`python -m launcher run`: web, Celery worker and
beat, the four simulated demo agents) on a fresh database made beside DATABASE_URL's, then, one
job at a time on the idle demo fleet: asks the API for a quote, submits the same spec at once,
waits for it to finish and for the meter to bill it to the end, and compares.

- ETA: quoted `eta_seconds` against placement -> done (the time that is billed).
- Cost: quoted `total_cost` against what the meter charged the job.

The first runs of a model are quoted from the chips' modelled speed (the quote says it has no
measurements); later ones from what each node delivered. The table marks which is which, and the
summary gives p50/p90 of |error| for each. Goal: p90 within ±15% for measured quotes on an idle
machine. Wall times are noisy on a shared box: the load average is printed beside the results.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Steps per job, cycled: different lengths, so the fixed overhead and the per-step speed both matter.
STEPS = (40, 80, 60, 120)
TIMEOUT_S = 900
WARM_RUNS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_database(url: str) -> str:
    import psycopg

    name = f"quote_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(url: str, database_url: str) -> None:
    import psycopg

    name = urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(check, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    raise SystemExit(f"timed out waiting for {what}")


def api_user() -> str:
    """A funded user with an API token; the raw token."""
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    from billing.services.credits import adjust_credit
    from kernel.money import to_micros
    from portal.models import ApiToken

    user = get_user_model().objects.create_user(username="bench", email="bench@example.com", password="x-x-x-x-x")
    EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=True)  # tokens need it
    adjust_credit(user, to_micros("1000"), reason="benchmark funds", actor=None, key="bench-funds")
    return ApiToken.issue(user)[1]


def actuals(job_id: int) -> tuple[float, Decimal, str]:
    """(placement -> done seconds, charged, final status), once the meter has billed every allocation to its end."""
    from django.db.models import Min, Sum

    from fleet.models import Allocation, Job
    from kernel.money import to_decimal

    job = Job.objects.get(pk=job_id)
    allocations = Allocation.objects.filter(job=job)
    started = allocations.aggregate(at=Min("started_at"))["at"]
    charged = allocations.aggregate(total=Sum("charged_total"))["total"] or 0
    return (job.finished_at - started).total_seconds(), to_decimal(charged), job.status


def billed_to_the_end(job_id: int) -> bool:
    from django.db.models import F

    from fleet.models import Allocation

    allocations = Allocation.objects.filter(job_id=job_id)
    return (
        allocations.exists()
        and not allocations.filter(ended_at__isnull=True).exists()
        # The meter bills whole seconds: done once less than one second is left unbilled.
        and not allocations.filter(billed_through__lte=F("ended_at") - timedelta(seconds=1)).exists()
    )


def run_job(client: httpx.Client, steps: int) -> dict:
    from fleet.models import Job

    spec = {"model": "llama-tiny", "max_steps": steps, "per_device_batch_size": 4, "max_budget": "28"}
    quote = client.post("/api/v1/quotes/", json=spec).raise_for_status().json()
    job_id = client.post("/api/v1/jobs/", json=spec).raise_for_status().json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).finished_at is not None, f"job {job_id} to finish", TIMEOUT_S)
    wait_for(lambda: billed_to_the_end(job_id), f"job {job_id} to be billed to its end", 60)
    seconds, cost, status = actuals(job_id)
    quoted_cost = Decimal(quote["total_cost"])
    return {
        "job": job_id,
        "steps": steps,
        "status": status,
        "chips": "+".join(f"{sum(m.values())}×{chip}" for chip, m in sorted(quote["chip_counts"].items())),
        "measured": quote.get("uncertainty") is not None,
        "uncertainty": quote.get("uncertainty"),
        "eta": quote["eta_seconds"],
        "actual_s": seconds,
        "eta_error": (seconds - quote["eta_seconds"]) / quote["eta_seconds"],
        "cost": quoted_cost,
        "actual_cost": cost,
        "cost_error": float((cost - quoted_cost) / quoted_cost) if quoted_cost else float("nan"),
    }


def summary(rows: list[dict], name: str, keep) -> str:
    chosen = [row for index, row in enumerate(rows) if keep(index, row)]
    if not chosen:
        return f"{name}: none"
    eta = sorted(abs(row["eta_error"]) for row in chosen)
    cost = sorted(abs(row["cost_error"]) for row in chosen)

    def p90(values: list[float]) -> float:
        return values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]

    return (
        f"{name} ({len(chosen)}): "
        f"|ETA error| p50 {statistics.median(eta):.1%} p90 {p90(eta):.1%}; "
        f"|cost error| p50 {statistics.median(cost):.1%} p90 {p90(cost):.1%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the platform and drops the database
    server = os.environ.get("DATABASE_URL")
    if not server or not os.environ.get("REDIS_URL"):
        print(
            "Set DATABASE_URL (a PostgreSQL server; a fresh database is made beside it) and REDIS_URL.", file=sys.stderr
        )
        return 2
    database = fresh_database(server)
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="quote-bench-"))
    env = {
        **os.environ,
        "DATABASE_URL": database,
        "STARVERSE_DATA_DIR": str(data_dir),
        "PORT": str(port),
        "LOG_FORMAT": "json",
        "STARVERSE_STRIPE": "off",
    }
    env.pop("DJANGO_SECRET_KEY", None)  # local mode generates one into the data dir
    log = open(data_dir / "platform.log", "w")  # noqa: SIM115 - closed at the end
    platform = subprocess.Popen(
        [sys.executable, "-m", "launcher", "run"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        os.environ.update(
            DATABASE_URL=database, STARVERSE_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="portal.settings"
        )
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{url}/healthz"), "the web server", 300)
        import django

        os.environ.setdefault("DJANGO_SECRET_KEY_FILE", str(data_dir / "secret_key"))
        django.setup()
        from fleet.choices import AgentStatus
        from fleet.models import Node

        wait_for(lambda: Node.objects.filter(agent_status=AgentStatus.ONLINE).count() >= 4, "the demo agents", 300)
        rows = []
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_user()}"}, timeout=60) as client:
            for index in range(args.jobs):
                rows.append(run_job(client, STEPS[index % len(STEPS)]))
                row = rows[-1]
                print(
                    f"job {row['job']:>3} {row['steps']:>4} steps {row['chips']:<34} "
                    f"{'measured ±' + format(row['uncertainty'], '.0%') if row['measured'] else 'no measurements':<16}"
                    f" ETA {row['eta']:7.1f}s actual {row['actual_s']:7.1f}s ({row['eta_error']:+.1%})"
                    f"  cost ¥{row['cost']:.4f} actual ¥{row['actual_cost']:.4f} ({row['cost_error']:+.1%})"
                    f"  {row['status']}",
                    flush=True,
                )
        print()
        print(summary(rows, "unmeasured quotes", lambda index, row: not row["measured"]))
        print(summary(rows, "measured quotes", lambda index, row: row["measured"]))
        # Every job runs on the same nodes, so job i's quote has i runs behind it (medians of the last 5).
        print(summary(rows, f"measured, {WARM_RUNS}+ runs behind", lambda index, row: index >= WARM_RUNS))
        print("load average {:.2f} {:.2f} {:.2f} on {} CPUs".format(*os.getloadavg(), os.cpu_count()))
        return 0
    finally:
        os.killpg(platform.pid, signal.SIGTERM)
        try:
            platform.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(platform.pid, signal.SIGKILL)
        log.close()
        from django.db import connections

        connections.close_all()
        drop_database(server, database)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
