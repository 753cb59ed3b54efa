"""The row validation of ``analytics.validate`` as one DuckDB expression, for ingest batches.

``analytics.validate.reasons_for`` (pyarrow) is the reference: it states the rules and their order
on one shard. Ingest validates thousands of shards an hour, and calling it once per shard cost more
than reading them (benchmarks.md, "Fleet scale"), so ingest evaluates the same rules, in the same
order and with the same arithmetic, as a SQL ``CASE`` over a whole batch of shards at once:
``reason_sql(table, now)`` gives, per row, the name of the first rule the row breaks, or NULL.
tests/reliability/test_row_checks.py checks on arbitrary rows (NaN, inf, huge, negative, null)
that both give every row the same reason.

The expression reads the contract columns (already cast to the contract types) plus ``_lo`` and
``_hi``, the bounds of the row's partition hour widened by ``limits.PARTITION_SKEW``.

Faithfulness notes. Every comparison is made in DOUBLE, as the reference casts to float64. The
reference combines two masks with ``pyarrow.compute.or_``, which is null when either side is null
(not Kleene logic), and a null mask means "not bad"; ``_or`` reproduces that. NaN compares
differently in DuckDB (greater than every number) than in Arrow (never true), but only float
columns can hold NaN and rule 1 charges every non-finite float first, so no later rule sees one.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from cudawatch import limits
from cudawatch import shards as sh


def _num(x: float) -> str:
    return f"'{float(x)!r}'::DOUBLE"


def _ts(t: dt.datetime) -> str:
    return f"'{t.astimezone(dt.timezone.utc).isoformat()}'::TIMESTAMPTZ"


def _f(col: str) -> str:
    return f"CAST({col} AS DOUBLE)"


def _or(a: str, b: str) -> str:
    """``pyarrow.compute.or_``: null when either side is null."""
    return f"(CASE WHEN ({a}) IS NULL OR ({b}) IS NULL THEN NULL ELSE ({a}) OR ({b}) END)"


def _outside(col: str, lo, hi) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{_f(col)} < {_num(lo)}")
    if hi is not None:
        parts.append(f"{_f(col)} > {_num(hi)}")
    return parts[0] if len(parts) == 1 else _or(*parts)


def rules(table: str, now: dt.datetime | None) -> list[tuple[str, str]]:
    """(reason, SQL condition) pairs in the order of ``analytics.validate.reasons_for`` (with a
    partition hour, the ingest case)."""
    schema = sh.SCHEMAS[table]
    out = []
    # 1. floats that are NaN or infinite
    for f in schema:
        if pa.types.is_floating(f.type):
            out.append((f"{f.name}_not_finite", f"NOT isfinite({f.name})"))
    # 2. timestamps
    ts = sh.TIME_COLUMN[table]
    out.append(("outside_partition_hour", f"{ts} < _lo OR {ts} >= _hi"))
    if now is not None:
        out.append(("in_the_future", f"{ts} > {_ts(now + limits.MAX_FUTURE)}"))
    out.append(("before_2020", f"{ts} < {_ts(limits.EARLIEST)}"))
    # 3. single-column ranges
    for name, (lo, hi) in limits.COLUMN_RANGES[table].items():
        out.append((f"{name}_out_of_range", _outside(name, lo, hi)))
    # 4. rules between columns
    if "sampling_duty" in schema.names:
        duty = _f("sampling_duty")
        too_low = f"{duty} < {_num(0)}" if table == "health" else f"{duty} <= {_num(0)}"
        out.append(("sampling_duty_out_of_range", _or(too_low, f"{duty} > {_num(1)}")))
    window_ns = f"({_f('window_s')} * {_num(1e9)})"
    if table in ("kernels", "memcpy"):
        count_col = "launches" if table == "kernels" else "count"
        rate = limits.MAX_LAUNCHES_PER_S if table == "kernels" else limits.MAX_COPIES_PER_S
        concurrent = limits.MAX_CONCURRENT_KERNELS if table == "kernels" else limits.MAX_CONCURRENT_COPIES
        total, count = _f("total_ns"), _f(count_col)
        max_count = f"({_f('window_s')} * {_num(rate)})"
        out.append((f"{count_col}_out_of_range", _or(f"{count} < {_num(1)}", f"{count} > {max_count}")))
        out.append(("total_ns_out_of_range", _or(f"{total} < {_num(1)}", f"{total} > ({window_ns} * {_num(concurrent)})")))
        out.append(("mean_ns_above_window", f"{total} > ({count} * {window_ns})"))
    if table == "kernels":
        out.append(("total_ns_below_launches", f"{_f('total_ns')} < {_f('launches')}"))
        mn, mx = _f("min_ns"), _f("max_ns")
        out.append(("min_ns_out_of_range", _or(f"{mn} < {_num(0)}", f"{mn} > {window_ns}")))
        out.append(("max_ns_out_of_range", _or(f"{mx} < {mn}", f"{mx} > {window_ns}")))
    if table == "memcpy":
        out.append(("bytes_above_bandwidth", f"{_f('bytes')} > ({_f('window_s')} * {_num(limits.MAX_COPY_BYTES_PER_S)})"))
    return out


def reason_sql(table: str, now: dt.datetime | None) -> str:
    """A SQL expression: the first rule a row of ``table`` breaks, or NULL for a possible row."""
    whens = " ".join(f"WHEN coalesce({cond}, false) THEN '{reason}'" for reason, cond in rules(table, now))
    return f"CASE {whens} END"
