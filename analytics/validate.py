"""Row-level validation of shards against the contract's physical limits (``cudawatch.limits``).

Pure pyarrow compute, no SQL and no I/O: ``validate_rows(table, data, partition_hour, now)`` takes
rows already conformed to the contract types (``cudawatch.shards.conform``) and returns the rows
that are physically possible plus the count of the rejected ones per reason. Each rejected row is
counted once, under the first rule it breaks (the order of ``reasons_for``), so the counts add up
to the rows rejected. ``Validation.quarantine`` says the shard is mostly bad and must be
quarantined whole. This is the reference statement of the rules; the store's ingest evaluates the
same rules as one SQL expression over a batch of shards (``analytics.store.row_checks``, checked
against this module row by row in tests/reliability/test_row_checks.py; docs/reliability.md).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from cudawatch import limits
from cudawatch import shards as sh

_NS = 1_000_000_000


@dataclass
class Validation:
    """Outcome of validating one shard's rows."""

    table: str
    rows: int
    good: pa.Table
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def rejected_rows(self) -> int:
        return sum(self.rejected.values())

    @property
    def quarantine(self) -> bool:
        """More than ``limits.QUARANTINE_FRACTION`` of the rows are impossible."""
        return mostly_bad(self.rows, self.rejected)

    def reason(self) -> str:
        """One line for the quarantine table: how many rows were bad, and why."""
        return describe(self.rows, self.rejected)


def mostly_bad(rows: int, rejected: dict[str, int]) -> bool:
    """A shard of ``rows`` rows with ``rejected`` (reason -> rows) is to be quarantined whole."""
    return rows > 0 and sum(rejected.values()) > limits.QUARANTINE_FRACTION * rows


def describe(rows: int, rejected: dict[str, int]) -> str:
    """The quarantine reason of such a shard: how many rows were bad, and why."""
    top = ", ".join(f"{r} {n}" for r, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{sum(rejected.values())} of {rows} rows break the contract's limits ({top})"


def _bad(mask) -> pa.ChunkedArray | pa.Array:
    """A boolean mask where null (a missing value) means 'not bad'."""
    return pc.fill_null(mask, False)


def _outside(col, lo, hi):
    """True where a non-null value lies outside [lo, hi] (either bound may be None); compared as
    float64, so int64 values of any size compare without overflow."""
    x = pc.cast(col, pa.float64(), safe=False)
    mask = None
    if lo is not None:
        mask = pc.less(x, float(lo))
    if hi is not None:
        above = pc.greater(x, float(hi))
        mask = above if mask is None else pc.or_(mask, above)
    return _bad(mask)


def _not_finite(col):
    return _bad(pc.invert(pc.is_finite(col)))


def _f64(data: pa.Table, name: str):
    return pc.cast(data.column(name), pa.float64(), safe=False)


def reasons_for(table: str, data: pa.Table, partition_hour: dt.datetime | None, now: dt.datetime | None):
    """(reason, bad-row mask) pairs for ``data``, in the order a row is charged to a reason."""
    checks = []
    # 1. floats that are NaN or infinite
    for f in data.schema:
        if f.name in sh.SCHEMAS[table].names and pa.types.is_floating(f.type):
            checks.append((f"{f.name}_not_finite", _not_finite(data.column(f.name))))
    # 2. timestamps: the partition hour +- skew, not in the future, not before EARLIEST
    ts = data.column(sh.TIME_COLUMN[table])
    if partition_hour is not None:
        lo = pa.scalar(partition_hour - limits.PARTITION_SKEW, ts.type)
        hi = pa.scalar(partition_hour + dt.timedelta(hours=1) + limits.PARTITION_SKEW, ts.type)
        checks.append(("outside_partition_hour", _bad(pc.or_(pc.less(ts, lo), pc.greater_equal(ts, hi)))))
    if now is not None:
        checks.append(("in_the_future", _bad(pc.greater(ts, pa.scalar(now + limits.MAX_FUTURE, ts.type)))))
    checks.append(("before_2020", _bad(pc.less(ts, pa.scalar(limits.EARLIEST, ts.type)))))
    # 3. single-column ranges
    for name, (lo, hi) in limits.COLUMN_RANGES[table].items():
        checks.append((f"{name}_out_of_range", _outside(data.column(name), lo, hi)))
    # 4. rules between columns
    if "sampling_duty" in data.column_names:
        # Rows of records: duty in (0, 1]. A health window may have been paused throughout: [0, 1].
        duty = _f64(data, "sampling_duty")
        too_low = pc.less(duty, 0.0) if table == "health" else pc.less_equal(duty, 0.0)
        checks.append(("sampling_duty_out_of_range", _bad(pc.or_(too_low, pc.greater(duty, 1.0)))))
    if table in ("kernels", "memcpy"):
        window_ns = pc.multiply(pc.cast(data.column("window_s"), pa.float64(), safe=False), float(_NS))
        total = _f64(data, "total_ns")
        count_col = "launches" if table == "kernels" else "count"
        count = _f64(data, count_col)
        rate = limits.MAX_LAUNCHES_PER_S if table == "kernels" else limits.MAX_COPIES_PER_S
        concurrent = limits.MAX_CONCURRENT_KERNELS if table == "kernels" else limits.MAX_CONCURRENT_COPIES
        max_count = pc.multiply(pc.cast(data.column("window_s"), pa.float64(), safe=False), float(rate))
        checks.append((f"{count_col}_out_of_range", _bad(pc.or_(pc.less(count, 1.0), pc.greater(count, max_count)))))
        checks.append(("total_ns_out_of_range", _bad(pc.or_(pc.less(total, 1.0),
                                                            pc.greater(total, pc.multiply(window_ns, float(concurrent)))))))
        # a launch (or copy) ends within a window: the mean duration is below the window length
        checks.append(("mean_ns_above_window", _bad(pc.greater(total, pc.multiply(count, window_ns)))))
    if table == "kernels":
        launches, total = _f64(data, "launches"), _f64(data, "total_ns")
        checks.append(("total_ns_below_launches", _bad(pc.less(total, launches))))
        mn, mx = _f64(data, "min_ns"), _f64(data, "max_ns")
        window_ns = pc.multiply(pc.cast(data.column("window_s"), pa.float64(), safe=False), float(_NS))
        checks.append(("min_ns_out_of_range", _bad(pc.or_(pc.less(mn, 0.0), pc.greater(mn, window_ns)))))
        checks.append(("max_ns_out_of_range", _bad(pc.or_(pc.less(mx, mn), pc.greater(mx, window_ns)))))
    if table == "memcpy":
        max_bytes = pc.multiply(pc.cast(data.column("window_s"), pa.float64(), safe=False), limits.MAX_COPY_BYTES_PER_S)
        checks.append(("bytes_above_bandwidth", _bad(pc.greater(_f64(data, "bytes"), max_bytes))))
    return checks


def validate_rows(
    table: str,
    data: pa.Table,
    partition_hour: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> Validation:
    """Split one shard's rows (already conformed to the contract types) into possible and impossible.

    partition_hour: the UTC hour of the shard's ``date=/hour=`` folder (rows must lie in it, +-
        ``limits.PARTITION_SKEW``); None skips that check. now: the ingest time (rows must not lie
        more than ``limits.MAX_FUTURE`` after it); None skips that check.
    """
    n = data.num_rows
    if n == 0:
        return Validation(table, 0, data)
    remaining = pa.array([True] * n)  # rows not yet charged to a reason
    rejected: dict[str, int] = {}
    for reason, bad in reasons_for(table, data, partition_hour, now):
        charged = pc.and_(bad, remaining)
        k = pc.sum(pc.cast(charged, pa.int64())).as_py() or 0
        if k:
            rejected[reason] = rejected.get(reason, 0) + k
            remaining = pc.and_(remaining, pc.invert(charged))
    good = data if not rejected else data.filter(remaining)
    return Validation(table, n, good, rejected)


def partition_hour_of(rel: str) -> dt.datetime:
    """The UTC hour of a shard path's ``date=YYYY-MM-DD/hour=HH`` folders.

    Raises ShardError for a path without them or with values that are not a date and an hour.
    """
    date = hour = None
    for part in rel.replace("\\", "/").split("/"):
        if part.startswith("date="):
            date = part[5:]
        elif part.startswith("hour="):
            hour = part[5:]
    if date is None or hour is None:
        raise sh.ShardError(f"{rel}: not under date=YYYY-MM-DD/hour=HH/")
    try:
        if len(hour) != 2 or not hour.isdigit():
            raise ValueError(hour)
        day = dt.date.fromisoformat(date)
        return dt.datetime(day.year, day.month, day.day, int(hour), tzinfo=dt.timezone.utc)
    except ValueError:
        raise sh.ShardError(f"{rel}: malformed partition folder date={date}/hour={hour} (want date=YYYY-MM-DD/hour=HH)") from None
