"""The ``detector_thresholds`` table: calibrations of the sequential detector on the fleet's own
history (analytics.fleet_calibration), newest last. ``detect_regressions`` reads the newest row
whose ``method`` is its statistic's version; none, or only rows of another method: the shipped
``analytics.sequential.DEFAULT_THRESHOLDS``."""

from __future__ import annotations

from analytics.store.regressions import has_table
from analytics.store.tx import transaction

DDL = """
CREATE TABLE IF NOT EXISTS detector_thresholds (
    calibrated_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    method VARCHAR NOT NULL,          -- analytics.online.model_version of the statistic
    as_of TIMESTAMPTZ NOT NULL,       -- the last replayed hour
    target DOUBLE NOT NULL,           -- false alerts per 1,000 series-days aimed at
    rate DOUBLE NOT NULL,             -- what the thresholds give on the replayed history
    series INTEGER NOT NULL,
    series_days DOUBLE NOT NULL,
    tail_p DOUBLE NOT NULL,
    thresholds DOUBLE[] NOT NULL      -- GLR threshold per window length m = 1.. (inf: never alarms)
)
"""


def ensure_table(con) -> None:
    con.execute(DDL)


def save(con, c) -> None:
    """Store one ``analytics.fleet_calibration.Calibration`` (a new row; earlier ones stay as history)."""
    ensure_table(con)
    with transaction(con):
        con.execute("INSERT INTO detector_thresholds (method, as_of, target, rate, series, series_days, tail_p, thresholds) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [c.method, c.as_of, c.target, c.rate, c.series, c.series_days, c.tail_p, list(c.thresholds)])


def current(con, method: str) -> tuple[float, ...] | None:
    """The newest stored thresholds of ``method``, or None."""
    if not has_table(con, "detector_thresholds"):
        return None
    row = con.execute("SELECT thresholds FROM detector_thresholds WHERE method = ? ORDER BY calibrated_at DESC, as_of DESC "
                      "LIMIT 1", [method]).fetchone()
    return None if row is None else tuple(float(x) for x in row[0])
