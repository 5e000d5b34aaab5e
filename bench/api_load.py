"""API load benchmark: signed-in clients reading account, jobs, chips, ledger and bids, as `make run` serves them.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x [REDIS_URL=redis://127.0.0.1:6379/0] \\
        .venv/bin/python bench/api_load.py [--clients 1,5,10,50] [--duration 20]

Target (issue #15): at 50 concurrent clients >= 300 requests/s with p95 <= 250 ms on a 2-core machine.

Why it is built this way: the number that matters is what `make run` serves, so the platform is started
exactly as `make run` starts it (`python -m launcher run`: gunicorn, Celery worker, planner and beat
under the supervisor), on a free port, in a throwaway data dir, against a throwaway database
`bench_api_load` on DATABASE_URL's server (dropped afterwards). A set REDIS_URL is used with a cache key
prefix and Celery queue of this run (their keys are deleted afterwards); without it the launcher's
embedded Redis runs in the data dir. The demo fleet is off (`--demo-fleet` turns it on): its simulated
training would only add noise. `--web-workers`/`--web-threads` start the platform with other gunicorn
counts (the launcher's WEB_WORKERS/WEB_THREADS; the default is `make run`'s);
`--chips-cache-seconds S` serves the chip list from a per-process copy at most S old.

It seeds `--users` users, each with a few funded ledger rows, finished jobs and closed bids, and an API
token; then for each client count runs locust headless (bench/api_load_users.py, no think time) for
`--duration` seconds after a short warm-up and prints one row per client count: requests/s, p50/p95/p99,
failures, and the CPU seconds the web workers, the database backends, the rest of the platform and
locust itself spent in that row, with the load average beside them. The machine is shared and noisy:
CPU per request is the honest figure; wall-clock throughput is what the target is judged on.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launched_platform import (  # noqa: E402
    Platform,
    close_django_connections,
    forget_redis_keys,
    launcher_command,
    launcher_env,
    use_its_settings,
)
from machine_speed import loop_ms  # noqa: E402 - bench/ is on the path when run
from throwaway_db import database_url, recreate_database  # noqa: E402

DATABASE = "bench_api_load"
TARGET_RPS, TARGET_P95_MS, TARGET_CLIENTS = 300.0, 250.0, 50
WARMUP_S = 5


# Seeding ------------------------------------------------------------------------------------------


def seed(users: int, jobs: int, ledger_rows: int, bids: int) -> list[str]:
    """`users` users with funded wallets, finished jobs and closed bids; returns one API token per user.

    Runs after the platform migrated the database; Django is set up here, in this process, only for this.
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from billing.services.credits import adjust_credit
    from fleet.choices import JobStatus, MigrationReason, MigrationStatus
    from fleet.models import ChipType, Job
    from kernel.money import to_micros
    from market.models import Bid, BidStatus
    from portal.models import ApiToken
    from workers.models import JobMigration

    chips = list(ChipType.objects.order_by("sort_order"))
    now = timezone.now()
    tokens = []
    for u in range(users):
        user = get_user_model().objects.create_user(username=f"load{u}", email=f"load{u}@example.com")
        EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=True)  # tokens need it
        for row in range(ledger_rows):
            adjust_credit(user, to_micros("5"), reason="load test credit", actor=None, key=f"load:{u}:{row}")
        made = []
        for j in range(jobs):
            job = Job.objects.create(
                owner=user,
                name=f"run {j}",
                model_name="llama-tiny",
                per_device_batch_size=4,
                max_steps=100,
                step=100,
                max_budget_per_hour=to_micros("28"),
                spot=True,
                spot_bid_per_hour=to_micros("1.5"),
                status=JobStatus.SUCCEEDED,
                started_at=now,
                finished_at=now,
            )
            if j % 2:
                JobMigration.objects.create(
                    job=job,
                    reason=MigrationReason.OUTBID,
                    status=MigrationStatus.RESUMED,
                    from_epoch=1,
                    to_epoch=2,
                    notice_at=now,
                    notice_seconds=30,
                    resumed_at=now,
                )
            made.append(job)
        for b in range(bids):
            Bid.objects.create(
                owner=user,
                job=made[b % len(made)],
                chip_type=chips[b % len(chips)],
                chips=1 + b % 4,
                max_price_per_hour=to_micros("1.5"),
                status=BidStatus.CLOSED,
                placed_at=now,
            )
        tokens.append(ApiToken.issue(user, name="load test")[1])
    return tokens


# The platform ---------------------------------------------------------------------------------------


def cpu_seconds(processes: list[psutil.Process]) -> dict[int, float]:
    seconds = {}
    for process in processes:
        try:
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return seconds


def database_backends() -> list[psutil.Process]:
    """PostgreSQL's backend processes serving the bench database ("postgres: user db host(port) state")."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if line.startswith("postgres:") and f" {DATABASE} " in f"{line} ":
            found.append(process)
    return found


@dataclass
class CpuSnapshot:
    web: dict[int, float]
    other: dict[int, float]
    database: dict[int, float]
    children: float  # this process's reaped children: the locust runs

    @classmethod
    def take(cls, platform: Platform) -> CpuSnapshot:
        family = platform.family()
        web = [p for p in family if _is_web(p)]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            web=cpu_seconds(web),
            other=cpu_seconds([p for p in family if p not in web]),
            database=cpu_seconds(database_backends()),
            children=usage.ru_utime + usage.ru_stime,
        )


def _is_web(process: psutil.Process) -> bool:
    try:
        return "gunicorn" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two snapshots; a process born in between counts from zero."""
    return sum(max(0.0, seconds - before.get(pid, 0.0)) for pid, seconds in after.items())


# Load ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    clients: int
    requests: int
    failures: int
    rps: float
    p50: float
    p95: float
    p99: float
    wall_s: float
    web_cpu: float
    db_cpu: float
    other_cpu: float
    locust_cpu: float
    load: float
    web_split: str  # CPU seconds of each gunicorn process: an uneven split is one worker holding most connections


def run_locust(platform: Platform, root: Path, tokens_file: Path, clients: int, duration: int, tag: str) -> dict:
    prefix = root / f"locust-{tag}"
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(REPO / "bench" / "api_load_users.py"),
        "--headless",
        "--users",
        str(clients),
        "--spawn-rate",
        str(clients),
        "--run-time",
        f"{duration}s",
        "--host",
        platform.url,
        "--csv",
        str(prefix),
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--stop-timeout",
        "5",
    ]
    env = {**os.environ, "API_LOAD_TOKENS": str(tokens_file)}
    with open(root / f"locust-{tag}.log", "w") as log:
        subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=duration + 60)
    with open(f"{prefix}_stats.csv") as stats:
        return next(row for row in csv.DictReader(stats) if row["Name"] == "Aggregated")


def measure(platform: Platform, root: Path, tokens_file: Path, clients: int, duration: int) -> Row:
    before = CpuSnapshot.take(platform)
    started = time.monotonic()
    stats = run_locust(platform, root, tokens_file, clients, duration, f"{clients}")
    wall = time.monotonic() - started
    after = CpuSnapshot.take(platform)
    return Row(
        clients=clients,
        requests=int(stats["Request Count"]),
        failures=int(stats["Failure Count"]),
        rps=float(stats["Requests/s"]),
        p50=float(stats["50%"]),
        p95=float(stats["95%"]),
        p99=float(stats["99%"]),
        wall_s=wall,
        web_cpu=spent(before.web, after.web),
        db_cpu=spent(before.database, after.database),
        other_cpu=spent(before.other, after.other),
        locust_cpu=after.children - before.children,
        load=os.getloadavg()[0],
        web_split="/".join(
            f"{max(0.0, seconds - before.web.get(pid, 0.0)):.1f}" for pid, seconds in sorted(after.web.items())
        ),
    )


def print_table(rows: list[Row], duration: int) -> None:
    print(f"\nAPI reads under load ({duration} s per row; CPU in seconds over the row; ms/req = (web + db) CPU)")
    header = (
        f"{'clients':>7} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'fails':>6} {'requests':>8} "
        f"{'web cpu':>8} {'db cpu':>7} {'other':>6} {'locust':>7} {'ms/req':>7} {'wall s':>6} {'load1':>6}  web split"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        per_request = (r.web_cpu + r.db_cpu) / r.requests * 1000 if r.requests else float("nan")
        print(
            f"{r.clients:>7} {r.rps:>7.1f} {r.p50:>7.0f} {r.p95:>7.0f} {r.p99:>7.0f} {r.failures:>6} {r.requests:>8} "
            f"{r.web_cpu:>8.1f} {r.db_cpu:>7.1f} {r.other_cpu:>6.1f} {r.locust_cpu:>7.1f} {per_request:>7.2f} "
            f"{r.wall_s:>6.1f} {r.load:>6.2f}  {r.web_split}"
        )
    at_target = next((r for r in rows if r.clients == TARGET_CLIENTS), None)
    if at_target is None:
        print(f"verdict: no row at {TARGET_CLIENTS} clients")
        return
    ok = at_target.rps >= TARGET_RPS and at_target.p95 <= TARGET_P95_MS and at_target.failures == 0
    print(
        f"verdict: {'PASS' if ok else 'FAIL'} at {TARGET_CLIENTS} clients: {at_target.rps:.0f} req/s "
        f"(target >= {TARGET_RPS:.0f}), p95 {at_target.p95:.0f} ms (target <= {TARGET_P95_MS:.0f}), "
        f"{at_target.failures} failures"
    )


# Redis clean-up -------------------------------------------------------------------------------------


# Main ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,5,10,50", help="comma-separated concurrent client counts")
    parser.add_argument("--duration", type=int, default=20, help="seconds of load per row")
    parser.add_argument("--users", type=int, default=50, help="seeded users, each with a token")
    parser.add_argument("--jobs", type=int, default=5, help="finished jobs per user")
    parser.add_argument("--ledger-rows", type=int, default=8, help="credits posted to each user's wallet")
    parser.add_argument("--bids", type=int, default=3, help="closed bids per user")
    parser.add_argument("--web-workers", type=int, help="gunicorn workers (default: as make run)")
    parser.add_argument("--web-threads", type=int, help="gunicorn threads per worker (default: as make run)")
    parser.add_argument("--demo-fleet", action="store_true", help="also run the demo fleet's simulated agents")
    parser.add_argument(
        "--chips-cache-seconds",
        type=float,
        help="serve the chip list from a per-process copy this old at most (API_CHIPS_CACHE_SECONDS)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, locust CSVs)")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL")
    if not url:
        parser.error("set DATABASE_URL to a PostgreSQL server: the database bench_api_load is made (and dropped) there")
    clients = [int(count) for count in args.clients.split(",")]

    root = Path(tempfile.mkdtemp(prefix="api-load-"))
    tag = f"apiload-{secrets.token_hex(4)}"
    redis_url = os.environ.get("REDIS_URL")
    env = launcher_env(database_url(url, DATABASE), root, tag, demo_fleet=args.demo_fleet)
    if args.chips_cache_seconds is not None:
        env["API_CHIPS_CACHE_SECONDS"] = str(args.chips_cache_seconds)
    if args.web_workers is not None:
        env["WEB_WORKERS"] = str(args.web_workers)
    if args.web_threads is not None:
        env["WEB_THREADS"] = str(args.web_threads)
    platform = Platform(root, env, launcher_command())
    recreate_database(url, DATABASE)
    try:
        platform.start()
        platform.wait_until_up()
        use_its_settings(env)
        tokens_file = root / "tokens.json"
        tokens_file.write_text(json.dumps(seed(args.users, args.jobs, args.ledger_rows, args.bids)))
        web = [p for p in platform.family() if _is_web(p)]
        print(
            f"platform up at {platform.url} ({len(web)} gunicorn processes: {_web_line(web)}); "
            f"{args.users} users x ({args.jobs} jobs, {args.ledger_rows} ledger rows, {args.bids} bids); "
            f"{os.cpu_count()} CPUs; machine speed: a fixed loop takes {loop_ms():.0f} ms (bench/machine_speed.py)"
        )
        run_locust(platform, root, tokens_file, min(5, max(clients)), WARMUP_S, "warmup")
        rows = []
        for count in clients:
            rows.append(measure(platform, root, tokens_file, count, args.duration))
            print(f"  {count} clients: {rows[-1].rps:.0f} req/s, p95 {rows[-1].p95:.0f} ms", flush=True)
        print_table(rows, args.duration)
        return 0
    finally:
        platform.stop()
        close_django_connections()
        recreate_database(url, DATABASE, drop_only=True)
        if redis_url:
            forget_redis_keys(redis_url, tag)
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _web_line(web: list[psutil.Process]) -> str:
    try:
        line = " ".join(web[0].cmdline()) if web else "none"
    except psutil.NoSuchProcess:
        return "?"
    parts = line.split()
    keep = {"--workers", "--threads", "--worker-class"}
    return " ".join(f"{p} {parts[i + 1]}" for i, p in enumerate(parts[:-1]) if p in keep)


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, line_buffering=True)
    sys.exit(main())
