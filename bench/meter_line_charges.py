"""What one Charge row per billing line would buy the meter, measured side by side with the shipped meter.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/meter_line_charges.py [--rounds 2]

A what-if, not the product: the shipped meter writes one Charge row per paid allocation per tick,
each checked by a statement trigger against its allocation, job and transaction. The "lines"
variant keeps everything else as shipped (the allocation rows locked, their marks and charged
totals written, the same exact arithmetic, the same ledger transactions) and writes one Charge
row per (job, chip type, mode, ledger transaction) instead, grouped from the UPDATE's RETURNING
rows in the same statement, with `allocation_id` left empty and a trigger that checks only the
line's job owner and its CHARGE transaction. A line check that looks through the job's allocations
(NOT EXISTS per line) was tried first and made the tick slower than shipped.

Each round runs both variants on fresh databases holding the same data (bench/meter.py's
population, its exactness check against Fractions and its ledger audit), shipped first, then
lines; the table at the end gives every round and the median ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meter as bench  # noqa: E402  (bench/meter.py, beside this file)

LINE_SCHEMA = r"""
ALTER TABLE billing_charge ALTER COLUMN allocation_id DROP NOT NULL;
CREATE OR REPLACE FUNCTION billing_charges_match_allocations() RETURNS trigger AS $$
DECLARE
    bad record;
BEGIN
    SELECT c.id, c.job_id INTO bad
      FROM inserted c
      LEFT JOIN workers_job j ON j.id = c.job_id
      LEFT JOIN billing_transaction t ON t.id = c.transaction_id
     WHERE j.owner_id IS DISTINCT FROM c.owner_id OR t.kind IS DISTINCT FROM 'charge'
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'charge line % does not match job %', bad.id, bad.job_id;
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
"""

# The shipped _save's statement, with the INSERT grouped by line.
LINE_SAVE = (
    "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],"
    " %s::bigint[]) AS v(id, old, whole, seconds, charged, txn)),"
    " moved AS (UPDATE workers_allocation a SET billed_through = a.started_at + v.whole * interval '1 second',"
    " charged_total = a.charged_total + v.charged FROM v WHERE a.id = v.id"
    " RETURNING a.job_id, a.chip_type_id, a.mode, a.chips,"
    " a.started_at + v.old * interval '1 microsecond' AS started_at, a.billed_through AS ended_at,"
    " v.seconds, v.charged, v.txn)"
    " INSERT INTO billing_charge (allocation_id, job_id, owner_id, chip_type_id, mode, chips,"
    " started_at, ended_at, seconds, amount, transaction_id, created_at)"
    " SELECT NULL, m.job_id, j.owner_id, m.chip_type_id, m.mode, sum(m.chips), min(m.started_at),"
    " max(m.ended_at), sum(m.seconds), sum(m.charged), m.txn, %s"
    " FROM moved m JOIN workers_job j ON j.id = m.job_id WHERE m.charged > 0"
    " GROUP BY m.job_id, j.owner_id, m.chip_type_id, m.mode, m.txn"
)


def save_lines(batch, posted, now) -> None:
    import numpy as np
    from django.db import connection

    from billing.services.meter_columns import US, int_array

    txns = np.array([posted.get(owner, 0) for owner in batch.owner.tolist()], dtype=np.int64)
    with connection.cursor() as cursor:
        cursor.execute(
            LINE_SAVE,
            [
                int_array(batch.id),
                int_array(batch.billed - batch.start),
                int_array((batch.mark - batch.start) // US),
                int_array(batch.seconds),
                int_array(batch.charged),
                int_array(np.where(batch.charged > 0, txns, 0)),
                now,
            ],
        )


SHIPPED: dict = {}  # the meter's own _save, kept while the lines variant replaces it


def use_variant(variant: str) -> None:
    """Make bench.populate leave the database (and the meter) in `variant`'s shape."""
    from django.db import connection

    from billing.services import meter

    SHIPPED.setdefault("save", meter._save)
    meter._save = save_lines if variant == "lines" else SHIPPED["save"]
    if variant == "lines":
        with connection.cursor() as cursor:
            cursor.execute(LINE_SCHEMA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="each round runs both variants once")
    args = parser.parse_args()
    run_args = argparse.Namespace(users=args.users, seed=args.seed, runs=1, allocation_fillfactor=None)
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    populate = bench.populate
    rows: list[tuple[int, str, dict]] = []
    try:
        for number in range(1, args.rounds + 1):
            for variant in ("shipped", "lines"):
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
                rows.append((number, variant, bench.run(run_args, url, args.allocations)))
                bench.copy_database(url, bench.SEED, None)
    finally:
        from django.db import connections

        connections.close_all()
        bench.recreate_database(url, drop_only=True)
        bench.copy_database(url, bench.SEED, None)
    print_table(rows)


def print_table(rows: list[tuple[int, str, dict]]) -> None:
    print(f"\n{'round':>5}  {'variant':<8}{'first tick':>11}{'cpu client':>11}{'cpu db':>9}{'next tick':>11}")
    for number, variant, row in rows:
        db = f"{row['db']:.3f}s" if row["db"] is not None else "-"
        print(f"{number:>5}  {variant:<8}{row['first']:>10.3f}s{row['cpu']:>10.3f}s{db:>9}{row['next']:>10.3f}s")
    first = {variant: median(row["first"] for _, v, row in rows if v == variant) for variant in ("shipped", "lines")}
    print(
        f"median first tick: shipped {first['shipped']:.3f}s, lines {first['lines']:.3f}s"
        f" (lines / shipped = {first['lines'] / first['shipped']:.2f}; target <= 1 s at 100,000)"
    )


if __name__ == "__main__":
    main()
