"""Meter benchmark (issue 4): one tick over 10,000 open allocations on PostgreSQL, target <= 1 s.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/meter.py [--allocations 10000]

Creates (and afterwards drops) a throwaway database `bench_meter` on DATABASE_URL's server,
migrates it, opens `--allocations` allocations of 1-8 chips on every chip type, half of them
on spot, owned by `--users` funded users, with a price change in the middle of their span; then
times one `run_meter` tick and a second (no-op) tick, and checks the charged total against an
independent exact computation (Fractions) and the ledger audit.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NAME = "bench_meter"


def bench_url(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{NAME}"))


def recreate_database(url: str, drop_only: bool = False) -> None:
    import psycopg

    server = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {NAME}")


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = bench_url(url)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_catalog", stdout=io.StringIO())


def populate(allocations: int, users: int, start: datetime, rng: random.Random) -> None:
    from django.contrib.auth import get_user_model

    from billing.choices import AccountKind, TransactionKind
    from billing.models import Entry, Price, Transaction
    from billing.services.ledger import platform_account, wallet_for
    from workers.choices import AllocationMode, JobStatus
    from workers.models import Allocation, ChipType, Job, Node

    User = get_user_model()
    people = User.objects.bulk_create([User(username=f"bench{i}", email=f"bench{i}@example.com") for i in range(users)])
    wallets = [wallet_for(user) for user in people]
    promotions = platform_account(AccountKind.PROMOTIONS)
    txn = Transaction.objects.create(
        idempotency_key="bench:funds", fingerprint="-", kind=TransactionKind.ADJUSTMENT, created_at=start
    )
    funds = 10**12
    Entry.objects.bulk_create(
        [Entry(transaction=txn, account=w, amount=funds, created_at=start) for w in wallets]
        + [Entry(transaction=txn, account=promotions, amount=-funds * len(wallets), created_at=start)]
    )
    for chip in ChipType.objects.all():  # a price change in the middle of the billed span
        price = chip.prices.order_by("-effective_at").first()
        Price.objects.create(
            chip_type=chip,
            on_demand_per_hour=price.on_demand_per_hour + 123_457,
            spot_floor_per_hour=price.spot_floor_per_hour + 65_537,
            effective_at=start + timedelta(seconds=90, microseconds=500_000),
        )
    nodes = list(Node.objects.select_related("pool"))
    jobs = Job.objects.bulk_create(
        [
            Job(
                owner=user,
                model_name="llama-tiny",
                per_device_batch_size=4,
                max_steps=10,
                max_budget_per_hour=10**9,
                status=JobStatus.RUNNING,
            )
            for user in people
        ]
    )
    rows = []
    for i in range(allocations):
        node = rng.choice(nodes)
        begun = start + timedelta(microseconds=rng.randrange(0, 60 * 10**6))
        rows.append(
            Allocation(
                job=jobs[i % len(jobs)],
                node=node,
                chip_type_id=node.pool.chip_type_id,
                chips=rng.randint(1, 8),
                mode=AllocationMode.SPOT if i % 2 else AllocationMode.ON_DEMAND,
                epoch=1,
                started_at=begun,
                billed_through=begun,
            )
        )
    Allocation.objects.bulk_create(rows, batch_size=5000)


def expected_total(now: datetime) -> int:
    """Each allocation's cost up to its last whole second, with Fractions; summed after rounding each."""
    from billing.models import Price
    from workers.choices import AllocationMode
    from workers.models import Allocation

    prices: dict[int, list] = {}
    for row in Price.objects.order_by("effective_at", "id").values_list(
        "chip_type_id", "effective_at", "on_demand_per_hour", "spot_floor_per_hour"
    ):
        prices.setdefault(row[0], []).append(row[1:])
    total = 0
    for chip_type_id, mode, chips, started in Allocation.objects.values_list(
        "chip_type_id", "mode", "chips", "started_at"
    ):
        end = started + timedelta(seconds=(now - started) // timedelta(seconds=1))
        rows = prices[chip_type_id]
        exact = Fraction(0)
        for i, (at, on_demand, spot) in enumerate(rows):
            lo, hi = max(at, started), min(rows[i + 1][0] if i + 1 < len(rows) else end, end)
            if hi > lo:
                per_hour = spot if mode == AllocationMode.SPOT else on_demand
                exact += Fraction(per_hour * chips * ((hi - lo) // timedelta(microseconds=1)), 3_600_000_000)
        whole, rest = divmod(exact.numerator, exact.denominator)
        total += whole + (2 * rest >= exact.denominator)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the bench_meter database")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    recreate_database(url)
    try:
        setup_django(url)
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            recreate_database(url, drop_only=True)


def run(args) -> None:
    from django.db import transaction

    from billing.models import Charge, Entry, Transaction
    from billing.services.ledger import audit_ledger
    from billing.services.meter import run_meter

    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    with transaction.atomic():
        populate(args.allocations, args.users, start, random.Random(args.seed))
    now = start + timedelta(seconds=180, microseconds=250_000)
    counts = lambda: Transaction.objects.count() + Entry.objects.count() + Charge.objects.count()  # noqa: E731
    before = counts()

    t = time.perf_counter()
    first = run_meter(now)
    first_s = time.perf_counter() - t
    written = counts() - before
    t = time.perf_counter()
    second = run_meter(now)
    second_s = time.perf_counter() - t

    expected = expected_total(now)
    problems = audit_ledger()
    print(f"{'tick':<14}{'allocations':>12}{'chip-seconds':>14}{'rows written':>14}{'charged':>18}{'time':>10}")
    for name, tick, rows, seconds in [
        ("first", first, written + first.allocations, first_s),
        ("second (no-op)", second, 0, second_s),
    ]:
        print(f"{name:<14}{tick.allocations:>12}{tick.seconds:>14}{rows:>14}{tick.charged:>18}{seconds:>9.3f}s")
    print(f"expected total {expected}, charged {first.charged}: {'exact' if expected == first.charged else 'MISMATCH'}")
    print("rows written = ledger transactions + entries + charge rows + allocation marks updated")
    assert first.allocations == args.allocations, "not every allocation was billed"
    assert first.charged == expected, f"charged {first.charged}, expected {expected}"
    assert second.charges == 0 and second.charged == 0
    assert not problems, problems
    print(f"target <= 1 s: {'met' if first_s <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
