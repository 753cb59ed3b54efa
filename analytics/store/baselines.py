"""The ``baselines`` table: one row per series and hour (analytics.baselines computes them)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from analytics.store.tx import transaction

BASELINES_DDL = """
CREATE TABLE IF NOT EXISTS baselines (
    series VARCHAR NOT NULL,
    series_key VARCHAR NOT NULL,
    job VARCHAR, kernel VARCHAR, kernel_id VARCHAR, gpu_uuid VARCHAR, signature VARCHAR,
    as_of TIMESTAMPTZ NOT NULL,
    value DOUBLE,            -- the series' value in the as_of hour (NULL when missing)
    ewma DOUBLE, ewma_prev DOUBLE, deviation DOUBLE, ewma_severity VARCHAR,
    n BIGINT, median DOUBLE, mad DOUBLE, p10 DOUBLE, p50 DOUBLE, p90 DOUBLE,
    alpha DOUBLE, window_hours INTEGER,
    PRIMARY KEY (series_key, as_of)
);
"""


def ensure_table(con) -> None:
    con.execute(BASELINES_DDL)


def previous_ewma(con, series: str, hour: dt.datetime, alpha: float) -> dict[str, float]:
    """EWMA of each series key of the family ``series`` at ``hour`` with this ``alpha``."""
    return dict(con.execute(
        "SELECT series_key, ewma FROM baselines WHERE series = ? AND as_of = ? AND alpha = ?", [series, hour, alpha]
    ).fetchall())


def replace_hour(con, series: str, as_of: dt.datetime, rows: pa.Table) -> None:
    """Make ``rows`` the baselines of the family ``series`` at ``as_of`` (one transaction)."""
    con.register("_baseline_rows", rows)
    try:
        with transaction(con):
            con.execute("DELETE FROM baselines WHERE series = ? AND as_of = ?", [series, as_of])
            con.execute("INSERT INTO baselines SELECT * FROM _baseline_rows")
    finally:
        con.unregister("_baseline_rows")
