"""Pipeline steps the CLI and the Airflow DAGs call: one function per step, each idempotent.

A step takes a warehouse connection and the hour it works on (from Airflow's
``data_interval_start``, never the clock).
"""

from __future__ import annotations

import datetime as dt

from analytics.results import Regression


def latest_hour(con) -> dt.datetime | None:
    """The last UTC hour with kernel data in the warehouse."""
    row = con.execute("SELECT max(date_trunc('hour', window_start)) FROM kernels").fetchone()
    return row[0] if row else None


def analyze(con, as_of: dt.datetime | None = None) -> list[Regression]:
    """Baselines, change-point detection and root cause up to ``as_of`` (default: latest hour)."""
    from analytics import baselines, detect, rules

    as_of = as_of or latest_hour(con)
    if as_of is None:
        return []
    baselines.update_baselines(con, as_of)
    regressions = detect.detect_regressions(con, as_of)
    return rules.attach_causes(con, regressions)
