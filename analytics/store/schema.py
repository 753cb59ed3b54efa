"""The warehouse's table and view definitions (docs/warehouse.md documents them for analysts).

Raw tables take the shard contract's columns (``cudawatch.shards.SCHEMAS``) plus the id of the
shard each row came from; the ledger records what was loaded, the quarantine what was refused.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from analytics.store.tx import transaction
from cudawatch import shards as sh

#: Raw tables take the shard contract's columns plus the id of the shard each row came from.
RAW_TABLES = tuple(sh.SCHEMAS)

_LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS shard_ledger (
    shard_id BIGINT PRIMARY KEY,
    path VARCHAR NOT NULL UNIQUE,      -- relative to the shard root
    table_name VARCHAR NOT NULL,
    partition_hour TIMESTAMPTZ,
    rows BIGINT,
    bytes BIGINT,
    loaded_at TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE SEQUENCE IF NOT EXISTS shard_id_seq START 1;
CREATE TABLE IF NOT EXISTS rejected_rows (
    path VARCHAR NOT NULL,             -- the shard, relative to the shard root
    table_name VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,           -- analytics.validate reason, 'duplicate' or 'shard_quarantined'
    rows BIGINT NOT NULL,
    recorded_at TIMESTAMPTZ DEFAULT current_timestamp,
    PRIMARY KEY (path, reason)
);
CREATE TABLE IF NOT EXISTS quarantine (
    path VARCHAR PRIMARY KEY,          -- relative to the shard root
    table_name VARCHAR,
    reason VARCHAR NOT NULL,
    bytes BIGINT,
    quarantined_at TIMESTAMPTZ DEFAULT current_timestamp
);
"""


#: Divisor that scales a duty-cycled collector's counts to the whole window (double precision:
#: ``sampling_duty`` is float32). Every query that sums launches, bytes or time uses it.
DUTY = "coalesce(nullif(sampling_duty, 0), 1)::DOUBLE"

#: A kernel row's launch configuration as one string, ``GxGxG/BxBxB/rR/sS`` (the series key).
SIGNATURE = ("concat_ws('/', concat_ws('x', grid_x, grid_y, grid_z), concat_ws('x', block_x, block_y, block_z), "
             "'r' || registers_per_thread, 's' || shared_mem_bytes)")

#: Hourly rollups the detectors, rules and reports share: tables (they were views until the fleet
#: benchmark showed every hourly run re-aggregating the whole raw history), kept up to date by
#: ``refresh_hourly`` for the hours each ingest batch or retention run touches. Counts are scaled
#: by 1/sampling_duty so a duty-cycled collector's launches stay comparable; durations are per
#: launch and need no scaling. name -> (raw tables it reads, their time column, SELECT with
#: {where} slots, one per raw table read: the hours being refreshed).
ROLLUPS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "kernel_hourly": (("kernels",), "window_start", f"""
SELECT date_trunc('hour', window_start) AS hour, job, kernel_id, any_value(kernel) AS kernel,
       grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, shared_mem_bytes,
       {SIGNATURE} AS signature,
       sum(launches / {DUTY}) AS launches,
       sum(total_ns / {DUTY}) AS total_ns,
       sum(total_ns) / nullif(sum(launches), 0) AS mean_ns,
       min(min_ns) AS min_ns, max(max_ns) AS max_ns,
       count(DISTINCT gpu_uuid) AS gpus
FROM kernels {{where}}
GROUP BY ALL"""),
    # gpu_busy_s over observed_gpu_s is the job's busy share (analytics/store/series.py). Observed
    # time is per GPU: the windows its kernel rows cover, plus the health windows (one per window and
    # process, also when the GPU ran nothing) of the processes that ran kernels on it in the hour;
    # a health window marked data_quality 'error' lost its kernel rows and is not observed time.
    # Each GPU counts at most 3600 s an hour. A GPU watched for part of an hour (collector start, a
    # restart, job start/end) is a shorter observation, not a fall of busy time.
    "job_hourly": (("kernels", "health"), "window_start", f"""
WITH k AS (SELECT * FROM kernels {{where}}),
     procs AS (SELECT DISTINCT date_trunc('hour', window_start) AS hour, job, host, pid, run_id, gpu_uuid FROM k),
     win AS (SELECT date_trunc('hour', window_start) AS hour, job, host, gpu_uuid, window_start, window_s FROM k
             UNION
             SELECT p.hour, p.job, p.host, p.gpu_uuid, h.window_start, h.window_s
             FROM (SELECT * FROM health {{where}}) h
             JOIN procs p ON p.hour = date_trunc('hour', h.window_start) AND p.job = h.job AND p.host = h.host
                         AND p.pid = h.pid AND p.run_id = h.run_id
             WHERE h.data_quality IS DISTINCT FROM 'error'),
     per_gpu AS (SELECT hour, job, least(3600, sum(window_s)) AS observed_s
                 FROM (SELECT hour, job, host, gpu_uuid, window_start, max(window_s) AS window_s FROM win GROUP BY ALL)
                 GROUP BY hour, job, host, gpu_uuid),
     obs AS (SELECT hour, job, sum(observed_s) AS observed_gpu_s FROM per_gpu GROUP BY ALL),
     busy AS (SELECT date_trunc('hour', window_start) AS hour, job,
                     sum(total_ns / {DUTY}) / 1e9 AS gpu_busy_s,
                     sum(launches / {DUTY}) AS launches,
                     count(DISTINCT gpu_uuid) AS gpus,
                     count(DISTINCT kernel_id) AS kernels
              FROM k GROUP BY ALL)
SELECT busy.hour, busy.job, gpu_busy_s, launches, gpus, kernels, obs.observed_gpu_s::DOUBLE AS observed_gpu_s
FROM busy LEFT JOIN obs ON obs.hour = busy.hour AND obs.job IS NOT DISTINCT FROM busy.job"""),
    "device_hourly": (("device",), "ts", """
SELECT date_trunc('hour', ts) AS hour, host, gpu_uuid, any_value(gpu_index) AS gpu_index,
       any_value(gpu_model) AS gpu_model, count(*) AS samples,
       avg(sm_util_pct) AS sm_util_pct, avg(sm_occupancy_pct) AS sm_occupancy_pct,
       avg(tensor_util_pct) AS tensor_util_pct, avg(dram_bw_util_pct) AS dram_bw_util_pct,
       avg(pcie_tx_bytes_s) AS pcie_tx_bytes_s, avg(pcie_rx_bytes_s) AS pcie_rx_bytes_s,
       avg(power_w) AS power_w, avg(temp_c) AS temp_c, avg(sm_clock_mhz) AS sm_clock_mhz,
       avg(mem_clock_mhz) AS mem_clock_mhz, bit_or(clocks_event_reasons) AS clocks_event_reasons,
       max(mem_used_bytes) AS mem_used_bytes
FROM device {where}
GROUP BY ALL"""),
    "memcpy_hourly": (("memcpy",), "window_start", f"""
SELECT date_trunc('hour', window_start) AS hour, job, copy_kind, src_kind, dst_kind,
       sum(count / {DUTY}) AS count,
       sum(bytes / {DUTY}) AS bytes,
       sum(total_ns / {DUTY}) AS total_ns,
       sum(bytes) / nullif(sum(total_ns), 0) AS bytes_per_ns
FROM memcpy {{where}}
GROUP BY ALL"""),
}


def refresh_hourly(con: duckdb.DuckDBPyConnection, raw_table: str, lo, hi) -> None:
    """Recompute the rollups that read ``raw_table`` for the UTC hours that hold ``lo`` .. ``hi``
    (both inclusive; timestamps). Call it in the transaction that changed the raw rows."""
    for name, (raws, col, select) in ROLLUPS.items():
        if raw_table not in raws:
            continue
        where = f"WHERE {col} >= date_trunc('hour', ?::TIMESTAMPTZ) AND {col} < date_trunc('hour', ?::TIMESTAMPTZ) + INTERVAL 1 HOUR"
        con.execute(f"DELETE FROM {name} WHERE hour >= date_trunc('hour', ?::TIMESTAMPTZ) "
                    f"AND hour < date_trunc('hour', ?::TIMESTAMPTZ) + INTERVAL 1 HOUR", [lo, hi])
        con.execute(f"INSERT INTO {name} {select.format(where=where)}", [lo, hi] * select.count("{where}"))


def drop_hourly_before(con: duckdb.DuckDBPyConnection, raw_table: str, cutoff) -> None:
    """After raw rows before ``cutoff`` were deleted: drop the rollup hours before it and
    recompute the hour that holds it (part of it may remain)."""
    for name, (raws, _, _) in ROLLUPS.items():
        if raw_table in raws:
            con.execute(f"DELETE FROM {name} WHERE hour < date_trunc('hour', ?::TIMESTAMPTZ)", [cutoff])
    refresh_hourly(con, raw_table, cutoff, cutoff)


def stale_rollups(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Rollups that are missing or not current: name -> what is there (``"missing"``, ``"view"``, a
    warehouse from before the rollups, or ``"columns"``, a table whose columns differ from its
    definition, e.g. ``job_hourly`` without ``observed_gpu_s``, before observed time)."""
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                             "WHERE table_schema = 'main' AND table_catalog = current_database()").fetchall())
    stale = {}
    for name in ROLLUPS:
        kind = kinds.get(name)
        if kind == "VIEW":
            stale[name] = "view"
        elif kind != "BASE TABLE":
            stale[name] = "missing"
        elif _columns(con, name) != _columns(con, ROLLUPS[name][2].format(where="")):
            stale[name] = "columns"
    return stale


def _columns(con: duckdb.DuckDBPyConnection, relation: str) -> list[tuple[str, str]]:
    """(name, type) of a table or of a SELECT (planned, not run)."""
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def _ensure_rollups(con: duckdb.DuckDBPyConnection) -> None:
    """Create missing rollup tables, filled from the raw tables, and rebuild stale ones from the raw
    rows (``stale_rollups``), each in one transaction: nothing but the rollup is touched, and an
    interrupted rebuild leaves the old table."""
    for name, what in stale_rollups(con).items():
        with transaction(con):
            if what == "view":
                con.execute(f"DROP VIEW {name}")
            elif what == "columns":
                con.execute(f"DROP TABLE {name}")
            con.execute(f"CREATE TABLE {name} AS {ROLLUPS[name][2].format(where='')}")


#: Hourly bookkeeping: which hours the analysis has run for, and which expected shards never came.
_HOURS_DDL = """
CREATE TABLE IF NOT EXISTS analysed_hours (
    hour TIMESTAMPTZ PRIMARY KEY,      -- a UTC hour whose baselines, detection and causes ran
    analysed_at TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE TABLE IF NOT EXISTS data_gaps (
    hour TIMESTAMPTZ NOT NULL,         -- the UTC hour whose shards were incomplete
    partition_name VARCHAR NOT NULL,   -- the hourly DAG's partition (shard root)
    host VARCHAR NOT NULL,             -- a host seen in the previous hours that sent nothing
    table_name VARCHAR NOT NULL,       -- the shard table it sent nothing for
    last_seen TIMESTAMPTZ,             -- the last hour with a shard of this host and table
    recorded_at TIMESTAMPTZ DEFAULT current_timestamp,
    PRIMARY KEY (hour, partition_name, host, table_name)
);
"""


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the raw tables, the ledger, the rejected-rows and quarantine tables and the hourly
    bookkeeping tables if missing."""
    for name, schema in sh.SCHEMAS.items():
        con.register("_empty", pa.Table.from_pylist([], schema=schema))
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS SELECT *, 0::BIGINT AS shard_id FROM _empty LIMIT 0")
        # a warehouse made before a contract version added nullable columns (health v2) gets them
        have = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?", [name]).fetchall()}
        missing = [c for c in schema.names if c not in have]
        if missing:
            types = {r[0]: r[1] for r in con.execute("DESCRIBE SELECT * FROM _empty").fetchall()}
            for col in missing:
                con.execute(f"ALTER TABLE {name} ADD COLUMN {col} {types[col]}")
        con.unregister("_empty")
    con.execute(_LEDGER_DDL)
    con.execute(_HOURS_DDL)
    _ensure_rollups(con)
