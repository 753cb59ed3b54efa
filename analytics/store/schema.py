"""The warehouse's table and view definitions (docs/warehouse.md documents them for analysts).

Raw tables take the shard contract's columns (``cudawatch.shards.SCHEMAS``) plus the id of the
shard each row came from; the ledger records what was loaded, the quarantine what was refused.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

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

#: Hourly views the detectors, rules and reports share. Counts are scaled by 1/sampling_duty so a
#: duty-cycled collector's launches stay comparable; durations are per launch and need no scaling.
_VIEWS = f"""
CREATE OR REPLACE VIEW kernel_hourly AS
SELECT date_trunc('hour', window_start) AS hour, job, kernel_id, any_value(kernel) AS kernel,
       grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, shared_mem_bytes,
       {SIGNATURE} AS signature,
       sum(launches / {DUTY}) AS launches,
       sum(total_ns / {DUTY}) AS total_ns,
       sum(total_ns) / nullif(sum(launches), 0) AS mean_ns,
       min(min_ns) AS min_ns, max(max_ns) AS max_ns,
       count(DISTINCT gpu_uuid) AS gpus
FROM kernels
GROUP BY ALL;

CREATE OR REPLACE VIEW job_hourly AS
SELECT date_trunc('hour', window_start) AS hour, job,
       sum(total_ns / {DUTY}) / 1e9 AS gpu_busy_s,
       sum(launches / {DUTY}) AS launches,
       count(DISTINCT gpu_uuid) AS gpus,
       count(DISTINCT kernel_id) AS kernels
FROM kernels
GROUP BY ALL;

CREATE OR REPLACE VIEW device_hourly AS
SELECT date_trunc('hour', ts) AS hour, host, gpu_uuid, any_value(gpu_index) AS gpu_index,
       any_value(gpu_model) AS gpu_model, count(*) AS samples,
       avg(sm_util_pct) AS sm_util_pct, avg(sm_occupancy_pct) AS sm_occupancy_pct,
       avg(tensor_util_pct) AS tensor_util_pct, avg(dram_bw_util_pct) AS dram_bw_util_pct,
       avg(pcie_tx_bytes_s) AS pcie_tx_bytes_s, avg(pcie_rx_bytes_s) AS pcie_rx_bytes_s,
       avg(power_w) AS power_w, avg(temp_c) AS temp_c, avg(sm_clock_mhz) AS sm_clock_mhz,
       avg(mem_clock_mhz) AS mem_clock_mhz, bit_or(clocks_event_reasons) AS clocks_event_reasons,
       max(mem_used_bytes) AS mem_used_bytes
FROM device
GROUP BY ALL;

CREATE OR REPLACE VIEW memcpy_hourly AS
SELECT date_trunc('hour', window_start) AS hour, job, copy_kind, src_kind, dst_kind,
       sum(count / {DUTY}) AS count,
       sum(bytes / {DUTY}) AS bytes,
       sum(total_ns / {DUTY}) AS total_ns,
       sum(bytes) / nullif(sum(total_ns), 0) AS bytes_per_ns
FROM memcpy
GROUP BY ALL;
"""


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
    con.execute(_VIEWS)
