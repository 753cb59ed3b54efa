"""Property-based tests (hypothesis): the shard reader, the row validator and the change-point
detector take arbitrary values (NaN, inf, huge, negative, constant, very short) without crashing
and never return an unbounded or out-of-contract result."""

from __future__ import annotations

import datetime as dt
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analytics.changepoint import ChangePointError, detect_change_points
from analytics.validate import reasons_for, validate_rows
from cudawatch import limits
from cudawatch import shards as sh

HOUR = dt.datetime(2026, 11, 1, 5, tzinfo=dt.timezone.utc)
NOW = dt.datetime(2026, 11, 3, tzinfo=dt.timezone.utc)
# Random exploration by default (run it locally to look for new failures); CI sets
# HYPOTHESIS_PROFILE=ci for a fixed sequence, so no landing is decided by chance. Failures found
# are pinned below with @example.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
PROFILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, 1e12]))
ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1, 2**31 - 1, 10**18, -5_000_000]))
# Timestamps from 1970 to 9999 (microseconds since the epoch), plus the partition hour itself.
stamps = st.one_of(st.integers(0, 253_402_300_799_000_000), st.just(int(HOUR.timestamp() * 1e6) + 60_000_000))


def _value(field: pa.Field):
    t = field.type
    if pa.types.is_timestamp(t):
        return stamps
    if pa.types.is_floating(t):
        return floats
    if pa.types.is_integer(t):
        bits = t.bit_width
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if pa.types.is_list(t):
        return st.lists(st.integers(0, 500), max_size=3)
    return st.text(max_size=8)


#: One plausible value per numeric column (an H200 under load); a drawn row keeps each with
#: probability ~1/2 and otherwise takes an arbitrary value, so both outcomes are exercised.
PLAUSIBLE = {
    "window_s": 600, "pid": 4242, "gpu_index": 3, "grid_x": 132, "grid_y": 1, "grid_z": 1, "block_x": 256,
    "block_y": 1, "block_z": 1, "registers_per_thread": 128, "shared_mem_bytes": 49152, "launches": 150_000,
    "total_ns": 9e10, "min_ns": 400_000, "max_ns": 900_000, "sumsq_ns2": 5e16, "sampling_duty": 1.0,
    "count": 500, "bytes": 2e9, "sm_util_pct": 97.0, "sm_occupancy_pct": 25.0, "tensor_util_pct": 60.0,
    "dram_bw_util_pct": 30.0, "pcie_tx_bytes_s": 1e6, "pcie_rx_bytes_s": 2e6, "power_w": 650.0, "temp_c": 70.0,
    "sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "clocks_event_reasons": 0, "mem_used_bytes": 8e10,
    "records": 10**6, "dropped_records": 0, "callback_s": 1.5, "overhead_pct": 0.4,
}
IN_HOUR = st.integers(int(HOUR.timestamp() * 1e6), int(HOUR.timestamp() * 1e6) + 3_599_999_999)


def _column(field: pa.Field):
    wild = _value(field)
    if field.nullable:
        wild = st.one_of(st.none(), wild)
    if pa.types.is_timestamp(field.type):
        return st.one_of(IN_HOUR, wild)
    if field.name in PLAUSIBLE:
        base = PLAUSIBLE[field.name]
        cast = int if pa.types.is_integer(field.type) else float
        return st.one_of(st.just(cast(base)), wild)
    return wild


@st.composite
def rows(draw, table: str):
    """1-20 rows of ``table``; each numeric value is plausible or arbitrary (NaN, inf, huge,
    negative, null where the contract allows it)."""
    schema = sh.SCHEMAS[table]
    n = draw(st.integers(1, 20))
    arrays = []
    for f in schema:
        if f.name == "schema_version":
            arrays.append(pa.array([1] * n, f.type))
            continue
        vals = draw(st.lists(_column(f), min_size=n, max_size=n))
        if pa.types.is_timestamp(f.type):
            arrays.append(pa.array(vals, pa.int64()).cast(f.type))
        else:
            arrays.append(pa.array(vals, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


@pytest.mark.parametrize("table", list(sh.SCHEMAS))
def test_plausible_rows_pass(table):
    """The strategy's plausible row is accepted, so the properties below are not vacuous."""
    schema = sh.SCHEMAS[table]
    row = {f.name: PLAUSIBLE.get(f.name) for f in schema}
    row["schema_version"] = 1
    row[sh.TIME_COLUMN[table]] = HOUR + dt.timedelta(minutes=10)
    for f in schema:
        if row[f.name] is None and not f.nullable:
            row[f.name] = "x"
    data = pa.Table.from_pylist([row], schema=schema)
    v = validate_rows(table, data, HOUR, NOW)
    assert v.rejected == {} and v.good.num_rows == 1


def _within_limits(table: str, good: pa.Table) -> None:
    """Every kept row passes every rule (re-checked independently with Python arithmetic)."""
    for reason, bad in reasons_for(table, good, HOUR, NOW):
        assert not any(bad.to_pylist()), reason
    ts = good.column(sh.TIME_COLUMN[table]).to_pylist()
    for t in ts:
        assert HOUR - limits.PARTITION_SKEW <= t < HOUR + dt.timedelta(hours=1) + limits.PARTITION_SKEW
    for name, (lo, hi) in limits.COLUMN_RANGES[table].items():
        for v in good.column(name).to_pylist():
            if v is None:
                continue
            assert math.isfinite(v) and (lo is None or v >= lo) and (hi is None or v <= hi), (name, v)
    if table == "kernels":
        for r in good.select(["launches", "total_ns", "window_s", "sampling_duty"]).to_pylist():
            assert 1 <= r["launches"] <= r["window_s"] * limits.MAX_LAUNCHES_PER_S
            assert r["launches"] <= r["total_ns"] <= r["launches"] * r["window_s"] * 1e9
            assert r["sampling_duty"] is None or 0 < r["sampling_duty"] <= 1


@pytest.mark.parametrize("table", list(sh.SCHEMAS))
def test_validator_takes_any_values_and_keeps_only_possible_rows(table):
    @PROFILE
    @given(data=rows(table))
    def check(data):
        v = validate_rows(table, data, HOUR, NOW)
        assert v.rows == data.num_rows
        assert v.good.num_rows + v.rejected_rows == data.num_rows  # each row counted once
        assert all(n > 0 for n in v.rejected.values())
        assert v.quarantine == (v.rejected_rows > limits.QUARANTINE_FRACTION * data.num_rows)
        _within_limits(table, v.good)

    check()


@PROFILE
@given(data=rows("kernels"), total_as=st.sampled_from(["int", "str", "float"]))
def test_reader_then_validator_on_written_files(tmp_path_factory, data, total_as):
    """A shard file with arbitrary values (total_ns also as strings or floats) is read into the
    contract or refused with ShardError naming it; whatever is read validates without a crash."""
    root = tmp_path_factory.mktemp("prop")
    folder = sh.partition_dir(root, "kernels", HOUR)
    folder.mkdir(parents=True)
    if total_as != "int":
        col = data.column("total_ns").to_pylist()
        conv = str if total_as == "str" else float
        data = data.set_column(data.schema.get_field_index("total_ns"), "total_ns", pa.array([conv(v) for v in col]))
    path = folder / "h-1-x.parquet"
    pq.write_table(data, path)
    try:
        read = sh.read_shard(path)
    except sh.ShardError as exc:
        assert str(path) in str(exc)
        return
    v = validate_rows("kernels", read, HOUR, NOW)
    assert v.good.num_rows + v.rejected_rows == read.num_rows
    _within_limits("kernels", v.good)


series = st.lists(st.one_of(floats, st.none()), max_size=60)


@PROFILE
@given(values=st.one_of(series, st.lists(floats, max_size=2), st.builds(lambda x, n: [x] * n, floats, st.integers(0, 60))))
def test_change_points_never_crash_never_unbounded(values):
    try:
        cps = detect_change_points(values)
    except ChangePointError as exc:  # the documented refusal: infinities are not data
        assert any(v is not None and math.isinf(v) for v in values), exc
        return
    n = sum(1 for v in values if v is not None and not math.isnan(v))
    assert len(cps) <= max(0, n // 3)  # at most one change per min_size points
    idx = [c.index for c in cps]
    assert idx == sorted(set(idx)) and all(0 < i < len(values) for i in idx)
    for c in cps:
        assert math.isfinite(c.mean_before) and math.isfinite(c.mean_after)
        assert 0.0 <= c.p_value <= 1.0
        assert math.isfinite(c.magnitude_pct) or c.mean_before == 0


@PROFILE
@given(level=st.floats(-1e300, 1e300, allow_nan=False), n=st.integers(0, 80))
def test_constant_series_has_no_change(level, n):
    assert detect_change_points([level] * n) == []


@PROFILE
@given(base=st.floats(1e-3, 1e15), n=st.integers(12, 60), noise=st.floats(0, 0.01), seed=st.integers(0, 2**32 - 1))
@example(base=1.0, n=14, noise=1e-12, seed=0)  # noise at the rounding level: every split had t = inf
@example(base=1.0, n=12, noise=1e-12, seed=0)
def test_step_of_any_scale_is_found_once(base, n, noise, seed):
    """A clean +50 % step is found, at the right place, whatever the unit (1e-3 .. 1e15)."""
    rng = np.random.default_rng(seed)
    x = np.full(n, base) * (1 + noise * rng.standard_normal(n) / 10)
    x[n // 2:] *= 1.5
    cps = detect_change_points(x.tolist())
    assert [c.index for c in cps] == [n // 2]
