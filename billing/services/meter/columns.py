"""What a batch of allocations owes, on numpy columns, to the micro-unit.

`meter.cost.owed` prices one allocation with Python integers: the price integrated over
[started_at, mark) in micro-unit-microseconds per hour, times its chips, divided by 3.6e9 and
rounded once, half up. A tick does that for every open allocation, and at 100,000 of them the
Python loop alone took most of a second. This module does the same arithmetic on int64 columns.

The integral of a long span outgrows an int64 (an hour at ¥30/h is already 1.08e17), so it is
kept in two halves that each fit: with every duration split as `q` whole seconds and `r`
microseconds, `A = Σ price × q` and `B = Σ price × r`, and the integral is `A × 10^6 + B`.
Then `chips × integral / 3.6e9 = chips × A / 3600 + chips × B / 3.6e9`, and with
`chips × A = 3600 × whole + rest` the rounding is decided on `rest × 10^6 + chips × B`, a small
number. Nothing is approximated; `Columns.exact` says whether every intermediate stays inside
an int64 for this batch, and the meter falls back to `meter.cost.owed` per allocation when it does not.

A batch's billing lines and their allocations, read as columns, are `Lines` and `Allocations`.
"""

from __future__ import annotations

import struct
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from psycopg import postgres
from psycopg.adapt import Loader

US = 1_000_000
US_PER_HOUR = 3600 * US
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
SAFE = 2**62  # every product is checked against this bound before it is computed
NO_END = np.iinfo(np.int64).max  # an open allocation's end, as a column value
POSTGRES_EPOCH_US = (datetime(2000, 1, 1, tzinfo=UTC) - EPOCH) // MICROSECOND


def to_us(at: datetime) -> int:
    """Microseconds since 1970 (UTC)."""
    return (at - EPOCH) // MICROSECOND


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


class PriceLines:
    """Running sums of the book's price segments, one line per (chip type, mode), in two int64 halves.

    `spans` gives each line's [origin, until): every time later asked about must lie in it.
    """

    def __init__(self, book, spans: dict[tuple[int, str], tuple[datetime, datetime]]):
        self._lines: dict[tuple[int, str], tuple[np.ndarray, ...]] = {}
        self.largest = 0  # the largest running half: bounds every difference of two
        for key, (origin, until) in spans.items():
            segments = book.segments(*key, origin, until)
            lo = np.array([to_us(lo) for lo, _, _ in segments], dtype=np.int64)
            hi = np.array([to_us(hi) for _, hi, _ in segments], dtype=np.int64)
            price = np.array([per_hour for _, _, per_hour in segments], dtype=np.int64)
            seconds = (until - origin) // timedelta(seconds=1) + 1
            if segments and (int(price.min()) < 0 or int(price.max()) * max(seconds, US * (len(segments) + 1)) >= SAFE):
                self.largest = SAFE
                continue
            whole, part = np.divmod(hi - lo, US)
            running_a = np.concatenate([[0], np.cumsum(price * whole)])
            running_b = np.concatenate([[0], np.cumsum(price * part)])
            self.largest = max(self.largest, int(running_a[-1]), int(running_b[-1]))
            self._lines[key] = (lo, hi, price, running_a, running_b)

    @property
    def exact(self) -> bool:
        return self.largest < SAFE // 8

    def running(self, key: tuple[int, str], at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The integral from the line's origin to each of `at`, as its (A, B) halves."""
        line = self._lines.get(key)
        if line is None or not len(line[0]):
            return np.zeros_like(at), np.zeros_like(at)
        lo, hi, price, running_a, running_b = line
        index = np.searchsorted(lo, at, side="right") - 1
        before = index < 0
        index[before] = 0
        # Inside segment `index`, or past its end when the next price is missing (that time is free).
        whole, part = np.divmod(np.clip(np.minimum(at, hi[index]) - lo[index], 0, None), US)
        a = running_a[index] + price[index] * whole
        b = running_b[index] + price[index] * part
        a[before] = 0
        b[before] = 0
        return a, b

    def owed(self, key: tuple[int, str], chips: np.ndarray, start: np.ndarray, mark: np.ndarray) -> np.ndarray:
        """cost_of_integral(chips × integral over [start, mark)) for each row, as `meter.cost.owed` computes it."""
        a0, b0 = self.running(key, start)
        a1, b1 = self.running(key, mark)
        whole, rest = np.divmod(chips * (a1 - a0), 3600)
        rest = rest * US + chips * (b1 - b0)
        return whole + (2 * rest + US_PER_HOUR) // (2 * US_PER_HOUR)

    def fits(self, chips: np.ndarray) -> bool:
        """Whether chips × a difference of running halves stays inside an int64 for these rows."""
        return self.exact and (not len(chips) or int(chips.max()) * 2 * self.largest < SAFE)


# Reading a batch as columns -------------------------------------------------------------------


class _Int8Array(Loader):
    """A bigint[] (or timestamptz[], same layout) in PostgreSQL's binary format, straight into numpy."""

    format = psycopg.pq.Format.BINARY
    shift = 0

    def load(self, data) -> np.ndarray:
        data = bytes(data)
        dims, _flags, _oid = struct.unpack_from(">iiI", data)
        if dims == 0:
            return np.empty(0, dtype=np.int64)
        length, _lower = struct.unpack_from(">ii", data, 12)
        # Each element: its byte length (always 8: the query leaves no NULL in) then the value.
        rows = np.frombuffer(data, dtype=[("size", ">i4"), ("value", ">i8")], count=length, offset=20)
        if (rows["size"] != 8).any():
            raise ValueError("a NULL in a column the meter reads as an array")
        values = rows["value"].astype(np.int64)
        if self.shift:
            values[values != NO_END] += self.shift
        return values


class _TimestampArray(_Int8Array):
    """Microseconds since 2000 on the wire; since 1970 here. 'infinity' stays NO_END."""

    shift = POSTGRES_EPOCH_US


def column_cursor(connection) -> psycopg.Cursor:
    """A cursor on `connection` that reads bigint[] and timestamptz[] results as int64 numpy arrays."""
    cursor = psycopg.Cursor(connection)
    cursor.adapters.register_loader(postgres.types["int8"].array_oid, _Int8Array)
    cursor.adapters.register_loader(postgres.types["timestamptz"].array_oid, _TimestampArray)
    return cursor


def int_array(values) -> str:
    """A PostgreSQL array literal of integers: one short string instead of one parameter per element."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    return "{" + ",".join(map(str, values)) + "}"


# A batch's billing lines and their allocations ------------------------------------------------


def columns_of(cls, values):
    """A dataclass of int64 columns from one row of array_agg results (empty columns for no rows)."""
    if values[0] is None:
        read = [column.name for column in fields(cls) if column.default is MISSING]
        return cls(**{name: np.empty(0, dtype=np.int64) for name in read})
    return cls(*values)


@dataclass
class Lines:
    """One batch's billing lines as columns (int64; times in microseconds since 1970), read under their
    row locks, and what this tick does to them."""

    id: np.ndarray
    job: np.ndarray
    owner: np.ndarray
    chip_type: np.ndarray
    spot: np.ndarray
    billed: np.ndarray
    charged_total: np.ndarray
    chip_seconds: np.ndarray
    settled_owed: np.ndarray
    settled_chip_seconds: np.ndarray
    owed: np.ndarray | None = None  # settled + each unsettled allocation's cost up to its new mark
    new_chip_seconds: np.ndarray | None = None
    chips: np.ndarray | None = None  # the chips of the allocations billed this tick
    settling_owed: np.ndarray | None = None  # what the allocations folded in this tick cost
    settling_chip_seconds: np.ndarray | None = None
    delta: np.ndarray | None = None  # owed beyond what was charged
    charged: np.ndarray | None = None  # what the wallet paid of it

    def __len__(self) -> int:
        return len(self.id)

    def take(self, rows: np.ndarray) -> Lines:
        return Lines(**{name: None if column is None else column[rows] for name, column in vars(self).items()})


@dataclass
class Allocations:
    """The unsettled allocations of a batch's lines as columns, and each one's new mark and cost."""

    id: np.ndarray
    row_line: np.ndarray  # the index of its line in the batch's Lines
    chips: np.ndarray
    start: np.ndarray
    end: np.ndarray  # NO_END while open
    mark: np.ndarray | None = None
    owed: np.ndarray | None = None
    settling: np.ndarray | None = None  # ended by now: folded into its line this tick

    @property
    def seconds(self) -> np.ndarray:
        return (self.mark - self.start) // US
