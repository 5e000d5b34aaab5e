"""What billing lines would buy the meter, measured side by side with the shipped meter.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/meter_line_charges.py [--rounds 2]

What-if, not the product. The shipped meter locks every open allocation, writes its new mark and
charged total, and writes one Charge row per billing line (a job's allocations of one chip type
and mode) and paying transaction per tick, grouped from the allocation UPDATE's RETURNING rows.
The variant is the next step of the billing-line design:

- `line-marks`: allocations are read without a row lock and not written; each line's mark and
  charged total go to a line table (one upsert per line), with one Charge row per line as shipped.
  This variant has no way yet to tell a billed second from an unbilled one on the allocation, so
  only its first tick is run; that tick's total is checked against the same exact Fractions
  computation and the ledger audit. Locking the line rows (about 180 a batch) is left out.

Each round runs the variants on fresh databases holding the same data (bench/meter.py's
population), in turn; the table at the end gives every round and the median ratio to shipped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meter as bench  # noqa: E402  (bench/meter.py, beside this file)

LINE_MARKS_SCHEMA = """
CREATE TABLE bench_billing_line (
    job_id bigint NOT NULL, chip_type_id bigint NOT NULL, mode varchar(12) NOT NULL,
    billed_through timestamptz NOT NULL, charged_total bigint NOT NULL,
    PRIMARY KEY (job_id, chip_type_id, mode)
);
"""

# The batch's lines, aggregated in numpy: the lines' new marks and charged totals, and their Charge rows.
LINE_MARKS_SAVE = (
    "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[],"
    " %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])"
    " AS v(job, owner, chip_type, mode, amount, chip_seconds, first, mark, txn)),"
    " lines AS (INSERT INTO bench_billing_line AS l (job_id, chip_type_id, mode, billed_through, charged_total)"
    " SELECT job, chip_type, mode, to_timestamp(mark / 1e6), amount FROM v"
    " ON CONFLICT (job_id, chip_type_id, mode) DO UPDATE SET billed_through = excluded.billed_through,"
    " charged_total = l.charged_total + excluded.charged_total)"
    " INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips,"
    " started_at, ended_at, seconds, chip_seconds, amount, transaction_id, created_at)"
    " SELECT NULL, job, owner, chip_type, mode, 1, to_timestamp(first / 1e6), to_timestamp(mark / 1e6),"
    " 1, chip_seconds, amount, txn, %s FROM v WHERE amount > 0"
)


# The shipped _lock's read without FOR UPDATE: in the design a batch locks its lines, not its allocations.
UNLOCKED_READ = (
    "WITH rows AS (SELECT a.id, a.job_id, j.owner_id, a.chip_type_id, a.mode, a.chips, a.started_at,"
    " a.ended_at, a.billed_through, a.charged_total"
    " FROM workers_allocation a JOIN workers_job j ON j.id = a.job_id WHERE a.id = ANY(%s::bigint[]))"
    " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(owner_id::bigint),"
    " array_agg(chip_type_id::bigint), array_agg((mode = %s)::int::bigint), array_agg(chips::bigint),"
    " array_agg(started_at), array_agg(coalesce(ended_at, 'infinity')), array_agg(billed_through),"
    " array_agg(charged_total) FROM rows"
)


def read_unlocked(ids, skip_locked):
    import numpy as np
    from django.db import connection

    from billing.services.meter import Batch
    from billing.services.meter_columns import column_cursor, int_array
    from workers.choices import AllocationMode

    connection.ensure_connection()
    with column_cursor(connection.connection) as cursor:
        cursor.execute(UNLOCKED_READ, [int_array(ids), AllocationMode.SPOT], binary=True)
        batch = Batch(*cursor.fetchone())
    return batch.take(np.argsort(batch.id, kind="stable"))


def save_line_marks(batch, posted, now) -> None:
    import numpy as np
    from django.db import connection

    from billing.services.meter_columns import int_array
    from workers.choices import AllocationMode

    txns = np.array([posted.get(owner, 0) for owner in batch.owner.tolist()], dtype=np.int64)
    keys = np.stack([batch.job, batch.chip_type, batch.spot != 0], axis=1)
    lines, row_line = np.unique(keys, axis=0, return_inverse=True)
    row_line = row_line.ravel()

    def per_line(values, combine, start=0):
        out = np.full(len(lines), start, dtype=np.int64)
        combine.at(out, row_line, values)
        return out

    modes = [AllocationMode.SPOT if spot else AllocationMode.ON_DEMAND for spot in lines[:, 2].tolist()]
    with connection.cursor() as cursor:
        cursor.execute(
            LINE_MARKS_SAVE,
            [
                int_array(lines[:, 0]),
                int_array(per_line(batch.owner, np.maximum)),
                int_array(lines[:, 1]),
                modes,
                int_array(per_line(batch.charged, np.add)),
                int_array(per_line(batch.seconds * batch.chips, np.add)),
                int_array(per_line(batch.billed, np.minimum, np.iinfo(np.int64).max)),
                int_array(per_line(batch.mark, np.maximum)),
                int_array(per_line(np.where(batch.charged > 0, txns, 0), np.maximum)),
                now,
            ],
        )


SHIPPED: dict = {}  # the meter's own _save and _lock, kept while a variant replaces them


def use_variant(variant: str) -> None:
    """Put the database (and the meter's functions) in `variant`'s shape; called inside populate's transaction."""
    from django.db import connection

    from billing.services import meter

    SHIPPED.setdefault("save", meter._save)
    SHIPPED.setdefault("lock", meter._lock)
    meter._save = save_line_marks if variant == "line-marks" else SHIPPED["save"]
    meter._lock = read_unlocked if variant == "line-marks" else SHIPPED["lock"]
    if variant == "line-marks":
        with connection.cursor() as cursor:
            cursor.execute(LINE_MARKS_SCHEMA)


def first_tick_only(args, allocations: int) -> dict:
    """One tick over fresh data, its total checked against the exact computation and the ledger audit."""
    import random
    from datetime import UTC, datetime, timedelta

    from django.db import transaction

    from billing.services.ledger import audit_ledger
    from billing.services.meter import run_meter

    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    with transaction.atomic():
        bench.populate(allocations, args.users, start, random.Random(args.seed))
    at = start + timedelta(seconds=180, microseconds=250_000)
    expected = bench.expected_total(at)
    tick, wall, cpu, db = bench.Clock()(lambda: run_meter(at))
    assert tick.allocations == allocations, "not every allocation was billed"
    assert tick.charged == expected, f"charged {tick.charged}, expected {expected}"
    problems = audit_ledger()
    assert not problems, problems
    db_cpu = f"{db:.3f}s" if db is not None else "-"  # None: the database server is not on this host
    print(f"first tick {wall:.3f}s ({cpu:.3f}s client + {db_cpu} database), charged {tick.charged} exactly")
    return {"first": wall, "cpu": cpu, "db": db, "next": None}


VARIANTS = ("shipped", "line-marks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="each round runs shipped and line-marks once")
    args = parser.parse_args()
    run_args = argparse.Namespace(users=args.users, seed=args.seed, runs=1, allocation_fillfactor=None)
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    populate = bench.populate
    rows: list[tuple[int, str, dict]] = []
    try:
        for number in range(1, args.rounds + 1):
            for variant in VARIANTS:
                bench.recreate_database(url)
                if not rows:
                    bench.setup_django(url)
                else:
                    bench.migrate()

                def populate_as(*a, variant=variant, **kw):
                    populate(*a, **kw)
                    use_variant(variant)

                bench.populate = populate_as
                print(f"\n== round {number}, {variant}: {args.allocations:,} open allocations ==")
                if variant == "line-marks":
                    rows.append((number, variant, first_tick_only(args, args.allocations)))
                else:
                    rows.append((number, variant, bench.run(run_args, url, args.allocations)))
                    bench.copy_database(url, bench.SEED, None)
    finally:
        from django.db import connections

        connections.close_all()
        bench.recreate_database(url, drop_only=True)
        bench.copy_database(url, bench.SEED, None)
    print_table(rows)


def print_table(rows: list[tuple[int, str, dict]]) -> None:
    print(f"\n{'round':>5}  {'variant':<11}{'first tick':>11}{'cpu client':>11}{'cpu db':>9}{'next tick':>11}")
    for number, variant, row in rows:
        db = f"{row['db']:.3f}s" if row["db"] is not None else "-"
        following = f"{row['next']:.3f}s" if row["next"] is not None else "not run"
        print(f"{number:>5}  {variant:<11}{row['first']:>10.3f}s{row['cpu']:>10.3f}s{db:>9}{following:>11}")
    first = {variant: median(row["first"] for _, v, row in rows if v == variant) for variant in VARIANTS}
    print(
        "median first tick: "
        + ", ".join(f"{v} {first[v]:.3f}s ({first[v] / first['shipped']:.2f}x)" for v in VARIANTS)
        + "; target <= 1 s at 100,000"
    )


if __name__ == "__main__":
    main()
