"""Agent fleet benchmark: N node agents long-polling one platform, commands delivered, reports ingested.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x REDIS_URL=redis://127.0.0.1:6379/14 \\
        .venv/bin/python bench/agents.py [--sizes 20,200,2000] [--duration 30]

Target (issue #15 part 2): 2,000 agents on one 2-core machine, command delivery p95 <= 1 s (queued by the
platform -> returned by the agent's poll), every report ingested, user API p95 <= 200 ms meanwhile.

How: a throwaway database `bench_agents` on DATABASE_URL's server is migrated and seeded (seed_catalog),
then the platform's web tier and agent service are started with `make run`'s own command lines
(launcher.processes.platform_processes: gunicorn, and uvicorn serving portal.asgi), with
AGENT_POLL_WAIT_S=--poll-wait and AGENT_HEARTBEAT_DEADLINE_S=--deadline (deadline > 2 x wait). Celery is
not started: nothing here needs it, and its meter and reconciler would only add noise. Per row, N nodes
are enrolled and given jobs of 20 ranks through the service layer (enroll_node, placement.allocate), then
N asyncio clients (two kept-alive connections each, as a real agent's poll and report threads have; a
lean HTTP/1.1 client, so that the load generator is not what is measured) long-poll /api/v1/agent/poll/
on the agent service with the real agent's bodies (health, ranks, acks), and each sends a one-line log
report every --report-every seconds (a failed one is sent again). After --warmup seconds, commands are queued at a
steady rate to random nodes through workers.services.commands.queue_for_node, and four user clients GET
/api/v1/account/ and /api/v1/jobs/ with their API tokens on the web tier, for --duration seconds.

Printed per row: polls/s, commands and their delivery p50/p95/max, reports sent vs log rows ingested,
nodes silent past the deadline (the reconciler would call them lost), user API p50/p95, and CPU seconds
of the agent service, the web tier, the bench database's backends and this process (the clients), with
the load average. The machine is shared and noisy: CPU per poll is the honest cost figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent_clients import Tally, agent, user  # noqa: E402 - bench/ is on the path when run
from agents_fleet import Fleet, Queuer, count_after, enroll_fleet, setup_django, user_tokens  # noqa: E402
from agents_platform import Platform, database_backend_cpu  # noqa: E402
from throwaway_db import database_url, recreate_database  # noqa: E402

from launcher.stores import free_port  # noqa: E402

DATABASE = "bench_agents"
USER_CLIENTS = 4
TARGET_DELIVERY_P95_S, TARGET_USER_P95_MS, TARGET_AGENTS = 1.0, 200.0, 2000


def raise_open_files_limit(wanted: int) -> int:
    """Each agent holds up to two sockets here and one in the agent service: lift the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


# A row ------------------------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Row:
    size: int
    polls_per_s: float
    commands: int
    delivered: int
    delivery_s: list[float]
    reports_sent: int
    ingested: int
    lost: int  # answered 200, yet not in the database
    duplicates: int  # ingested twice (a retry of a report whose answer was lost: the agent's at-least-once)
    report_errors: int
    poll_errors: int
    error_kinds: Counter
    silent: int
    user_ms: list[float]
    user_errors: int
    cpu: dict[str, float]
    wall_s: float
    load: float


async def drive(platform: Platform, fleet: Fleet, tokens: list[str], args, queued: dict) -> tuple[Tally, float, dict]:
    tally, stop, stop_users = Tally(), asyncio.Event(), asyncio.Event()
    port = int(platform.env["AGENT_PORT"])
    agents = [asyncio.create_task(agent("127.0.0.1", port, node, args, tally, stop)) for node in fleet.nodes]
    users = [asyncio.create_task(user(platform.web_url, token, tally, stop_users)) for token in tokens]
    await asyncio.sleep(args.ramp + args.warmup)
    cpu_before = {
        **platform.cpu_seconds(),
        "db": await asyncio.to_thread(database_backend_cpu, args.bench_db_url, DATABASE),
    }
    process_before, started = time.process_time(), time.perf_counter()
    tally.measuring = True
    queuer = Queuer(fleet, args.commands_per_s or max(2.0, len(fleet.nodes) / 200), queued)
    queuer.start()
    await asyncio.sleep(args.duration)
    queuer.stopped.set()
    await asyncio.to_thread(queuer.join)
    await asyncio.sleep(3)  # the last commands' deliveries
    tally.measuring = False
    wall = time.perf_counter() - started
    cpu_after = {
        **platform.cpu_seconds(),
        "db": await asyncio.to_thread(database_backend_cpu, args.bench_db_url, DATABASE),
    }
    db_before, db_after = cpu_before.pop("db"), cpu_after.pop("db")
    cpu = {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after}
    cpu["db"] = sum(spent - db_before.get(pid, 0.0) for pid, spent in db_after.items())
    cpu["clients"] = time.process_time() - process_before
    stop.set()
    stop_users.set()
    await asyncio.sleep(0.5)
    await asyncio.wait(users, timeout=10)
    # Reports in flight finish (a report is small); waiting polls are abandoned, as a stopped agent's are.
    for task in agents:
        task.cancel()
    await asyncio.gather(*agents, return_exceptions=True)
    return tally, wall, cpu


def run_row(platform: Platform, size: int, tokens: list[str], args) -> Row:
    fleet = enroll_fleet(size, f"{size}-{secrets.token_hex(3)}")
    queued: dict[int, float] = {}
    tally, wall, cpu = asyncio.run(drive(platform, fleet, tokens, args, queued))
    time.sleep(args.flush_s + 1)  # the agent service's last heartbeat flush, reports answered just now
    lines, silent = count_after(fleet, args.deadline)
    delivery = [tally.received[pk] - at for pk, at in queued.items() if pk in tally.received]
    return Row(
        size=size,
        polls_per_s=tally.polls / wall,
        commands=len(queued),
        delivered=len(delivery),
        delivery_s=delivery,
        reports_sent=len(tally.reports_sent),
        ingested=len(lines),
        lost=len(tally.reports_sent - set(lines)),
        duplicates=len(lines) - len(set(lines)),
        report_errors=tally.report_errors,
        poll_errors=tally.poll_errors,
        error_kinds=tally.error_kinds,
        silent=silent,
        user_ms=tally.user_ms,
        user_errors=tally.user_errors,
        cpu=cpu,
        wall_s=wall,
        load=os.getloadavg()[0],
    )


def print_table(rows: list[Row], args) -> None:
    print(
        f"\nAgent fleet, poll wait {args.poll_wait}s, heartbeat deadline {args.deadline}s, "
        f"{args.duration}s measured per row, {os.cpu_count()} CPUs"
    )
    print(
        f"{'agents':>6} {'polls/s':>7} {'cmds':>5} {'deliv':>5} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} "
        f"{'reports':>7} {'ingest':>6} {'lost':>4} {'dup':>3} {'silent':>6} "
        f"{'user p50':>8} {'user p95':>8} {'users':>5} "
        f"{'cpu svc':>7} {'cpu web':>7} {'cpu db':>6} {'cpu cli':>7} {'svc ms/poll':>11} {'wall s':>6} {'load':>5}"
    )
    for row in rows:
        ms = [s * 1000 for s in row.delivery_s]
        per_poll = row.cpu["agents"] * 1000 / max(1.0, row.polls_per_s * row.wall_s)
        print(
            f"{row.size:>6} {row.polls_per_s:>7.1f} {row.commands:>5} {row.delivered:>5} "
            f"{percentile(ms, 0.5):>7.0f} {percentile(ms, 0.95):>7.0f} {max(ms, default=float('nan')):>7.0f} "
            f"{row.reports_sent:>7} {row.ingested:>6} {row.lost:>4} {row.duplicates:>3} {row.silent:>6} "
            f"{percentile(row.user_ms, 0.5):>8.0f} {percentile(row.user_ms, 0.95):>8.0f} {len(row.user_ms):>5} "
            f"{row.cpu['agents']:>7.1f} {row.cpu['web']:>7.1f} {row.cpu['db']:>6.1f} {row.cpu['clients']:>7.1f} "
            f"{per_poll:>11.2f} {row.wall_s:>6.1f} {row.load:>5.2f}"
        )
        if row.report_errors or row.poll_errors or row.user_errors:
            print(
                f"{'':>6} errors: {row.poll_errors} poll, {row.report_errors} report (retried), "
                f"{row.user_errors} user API; {dict(row.error_kinds.most_common(6))}"
            )
    print(
        "cpu: seconds in the measured window; svc = agent service (uvicorn), web = gunicorn, db = the bench "
        "database's backends, cli = this process (the agents and users)"
    )
    for row in rows:
        p95 = percentile(row.delivery_s, 0.95)
        user_p95 = percentile(row.user_ms, 0.95)
        verdicts = [
            ("delivery p95 <= 1 s", row.delivered == row.commands and p95 <= TARGET_DELIVERY_P95_S),
            ("all reports ingested (none lost)", row.lost == 0),
            ("no node silent past the deadline", row.silent == 0),
        ]
        if row.size >= TARGET_AGENTS:
            verdicts.append(("user API p95 <= 200 ms", user_p95 <= TARGET_USER_P95_MS))
        for what, ok in verdicts:
            print(f"{'PASS' if ok else 'FAIL'} {row.size:>5} agents: {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,200,2000")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per row")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds after the last agent started")
    parser.add_argument("--ramp", type=float, default=5.0, help="agents start spread over this many seconds")
    parser.add_argument("--poll-wait", type=int, default=20, help="AGENT_POLL_WAIT_S")
    parser.add_argument("--deadline", type=int, default=60, help="AGENT_HEARTBEAT_DEADLINE_S (> 2 x wait)")
    parser.add_argument("--report-every", type=float, default=30.0, help="seconds between an agent's reports")
    parser.add_argument("--commands-per-s", type=float, default=0.0, help="default: max(2, agents / 200)")
    args = parser.parse_args()
    args.flush_s = 1.0
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        print("Set DATABASE_URL (a PostgreSQL server) and REDIS_URL (a Redis database of your own).", file=sys.stderr)
        return 2
    sizes = [int(size) for size in args.sizes.split(",")]
    files = raise_open_files_limit(4 * max(sizes) + 1024)
    args.bench_db_url = database_url(os.environ["DATABASE_URL"], DATABASE)
    recreate_database(os.environ["DATABASE_URL"], DATABASE)
    data_dir = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    env = {
        **os.environ,
        "DATABASE_URL": args.bench_db_url,
        "STARVERSE_DATA_DIR": str(data_dir),
        "STORAGE_URL": f"file://{data_dir / 'storage'}",
        "PORT": str(free_port()),
        "AGENT_PORT": str(free_port()),
        "STARVERSE_DEMO_FLEET": "0",
        "AGENT_POLL_WAIT_S": str(args.poll_wait),
        "AGENT_HEARTBEAT_DEADLINE_S": str(args.deadline),
        "AGENT_HEARTBEAT_FLUSH_S": str(args.flush_s),
        "CACHE_KEY_PREFIX": f"bench-agents-{os.getpid()}",
        "THROTTLE_USER": "100000/min",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(40),
    }
    os.environ.update(env)  # this process seeds the same database and queues through the same Redis
    log = data_dir / "platform.log"
    for command in (["migrate", "--noinput", "-v", "0"], ["seed_catalog"]):
        subprocess.run(
            [sys.executable, "manage.py", *command], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL
        )
    platform = Platform(env, log)
    rows: list[Row] = []
    try:
        platform.start()
        setup_django()
        tokens = user_tokens(USER_CLIENTS)
        print(f"platform up (web {platform.web_url}, agent service {platform.agents_url}); open files limit {files}")
        for size in sizes:
            rows.append(run_row(platform, size, tokens, args))
            print(
                f"  {size} agents: done ({rows[-1].delivered}/{rows[-1].commands} delivered, "
                f"p95 {percentile(rows[-1].delivery_s, 0.95):.3f}s)",
                flush=True,
            )
    finally:
        platform.stop()
        from django.db import connections

        connections.close_all()
        recreate_database(os.environ["DATABASE_URL"], DATABASE, drop_only=True)
    print_table(rows, args)
    if "Traceback" in log.read_text():
        print(f"(the platform logged tracebacks: {log})")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
