"""A batch of billing lines locked, and read with their unsettled allocations as numpy columns."""

from __future__ import annotations

import numpy as np
from django.db import connection

from billing.services.meter.columns import Allocations, Lines, column_cursor, columns_of, int_array
from fleet.choices import AllocationMode

# An allocation still to bill: open, or ended and not yet folded into its line (folding it in sets
# its billed_through to its last whole second, which is after ended_at - 1 s).
UNSETTLED = "(a.ended_at IS NULL OR a.billed_through <= a.ended_at - interval '1 second')"
OF_LINE = "a.job_id = l.job_id AND a.chip_type_id = l.chip_type_id AND a.mode = l.mode"


def lock_lines(ids: list[int], skip_locked: bool) -> Lines:
    """Lock the line rows in id order and read them back as columns (one array each)."""
    sql = (
        "WITH locked AS (SELECT l.id, l.job_id, j.owner_id, l.chip_type_id, l.mode, l.billed_through,"
        " l.charged_total, l.chip_seconds, l.settled_owed, l.settled_chip_seconds"
        " FROM billing_billingline l JOIN workers_job j ON j.id = l.job_id"
        " WHERE l.id = ANY(%s::bigint[]) ORDER BY l.id FOR UPDATE OF l" + (" SKIP LOCKED" if skip_locked else "") + ")"
        " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(owner_id::bigint),"
        " array_agg(chip_type_id::bigint), array_agg((mode = %s)::int::bigint), array_agg(billed_through),"
        " array_agg(charged_total), array_agg(chip_seconds), array_agg(settled_owed),"
        " array_agg(settled_chip_seconds) FROM locked"
    )
    lines = columns_of(Lines, _read(sql, [int_array(ids), AllocationMode.SPOT]))
    return lines.take(np.argsort(lines.id, kind="stable"))  # the aggregate's order is not the lock's


def read_allocations(lines: Lines) -> Allocations:
    """The lines' unsettled allocations, read after the lines' locks (an allocation ended by a committed
    transaction is seen ended). They are not locked: only the meter writes their billing columns.

    They are reached by job (one index scan, whatever the planner knows of the tables) and matched to
    the batch's lines here: a job's allocations of a line another tick holds are left alone.
    """
    sql = (
        "WITH rows AS (SELECT a.id, a.job_id, a.chip_type_id, a.mode, a.chips, a.started_at, a.ended_at"
        f" FROM workers_allocation a WHERE a.job_id = ANY(%s::bigint[]) AND {UNSETTLED})"
        " SELECT array_agg(id::bigint), array_agg(job_id::bigint), array_agg(chip_type_id::bigint),"
        " array_agg((mode = %s)::int::bigint), array_agg(chips::bigint), array_agg(started_at),"
        " array_agg(coalesce(ended_at, 'infinity')) FROM rows"
    )
    values = _read(sql, [int_array(np.unique(lines.job)), AllocationMode.SPOT])
    if values[0] is None:
        return columns_of(Allocations, values)
    ids, jobs, chip_types, spot, chips, start, end = values
    row_line = _match_lines(lines, jobs, chip_types, spot)
    mine = row_line >= 0
    return Allocations(ids[mine], row_line[mine], chips[mine], start[mine], end[mine])


def _match_lines(lines: Lines, jobs: np.ndarray, chip_types: np.ndarray, spot: np.ndarray) -> np.ndarray:
    """Each allocation's index among the batch's lines, by (job, chip type, mode); -1 where its line is not one."""
    if (
        max(int(lines.job.max()), int(jobs.max())) < 2**42
        and max(int(lines.chip_type.max()), int(chip_types.max())) < 2**20
    ):
        line_keys = _line_key(lines.job, lines.chip_type, lines.spot)  # lines are sorted by id, not by key
        by_key = np.argsort(line_keys, kind="stable")
        keys = _line_key(jobs, chip_types, spot)
        found = by_key[np.minimum(np.searchsorted(line_keys[by_key], keys), len(by_key) - 1)]
        return np.where(line_keys[found] == keys, found, -1)
    index = {
        key: i
        for i, key in enumerate(zip(lines.job.tolist(), lines.chip_type.tolist(), lines.spot.tolist(), strict=True))
    }
    return np.array(
        [index.get(key, -1) for key in zip(jobs.tolist(), chip_types.tolist(), spot.tolist(), strict=True)],
        dtype=np.int64,
    )


def _line_key(jobs: np.ndarray, chip_types: np.ndarray, spot: np.ndarray) -> np.ndarray:
    """(job, chip type, mode) as one int64, for job ids below 2^42 and chip type ids below 2^20."""
    return (jobs << 21) | (chip_types << 1) | (spot != 0)


def _read(sql: str, params: list) -> tuple:
    # Arrays in PostgreSQL's binary format, read straight into numpy: reading 2,500 rows of
    # timestamps as Python objects cost more than the rest of the read. Same connection, same
    # transaction as Django's cursors.
    connection.ensure_connection()
    with connection.wrap_database_errors, column_cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        return cursor.fetchone()
