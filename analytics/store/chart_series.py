"""The hourly values of the series a regression was found in, for its charts."""

from __future__ import annotations

import datetime as dt

from analytics.results import Regression
from analytics.store.report import fetch_rows
from analytics.store.series import SPEC_BY_NAME
from cudawatch.shards import hour_floor


#: series name prefix -> (view, key columns taken from the Regression, time column)
_SERIES_SOURCES = {
    "kernel_": ("kernel_hourly", ("job", "kernel_id", "signature")),
    "job_": ("job_hourly", ("job",)),
    "gpu_": ("device_hourly", ("gpu_uuid",)),
}


def _view_columns(con, view: str) -> set[str]:
    return {r[0] for r in fetch_rows(con, "SELECT column_name FROM information_schema.columns WHERE table_name = ?", (view,))}


def regression_series(con, r: Regression, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, float]]:
    """Hourly values of the series a regression was found in, e.g. ``kernel_mean_ns`` ->
    ``kernel_hourly.mean_ns`` for the regression's job, kernel and launch signature (launch
    configurations are summed when the signature is unknown, weighting by launches for means).
    The detector's own series definitions (``analytics.store.series.SPEC_BY_NAME``) are used when they
    know the name, so the chart shows exactly what was analysed. Unknown series names give an
    empty list; column names are checked against the view, never interpolated from input."""
    spec_points = _spec_series(con, r, start, end)
    if spec_points is not None:
        return spec_points
    for prefix, (view, keys) in _SERIES_SOURCES.items():
        if r.series.startswith(prefix):
            break
    else:
        return []
    metric = r.series[len(prefix):]
    if metric == "busy_s" and view == "job_hourly":
        metric = "gpu_busy_s"
    columns = _view_columns(con, view)
    if metric not in columns:
        return []
    where, params = ["hour >= ?", "hour < ?"], [start, end]
    for key in keys:
        value = getattr(r, key)
        if value is not None and key in columns:
            where.append(f"{key} = ?")
            params.append(value)
    if view == "kernel_hourly" and metric in ("mean_ns", "min_ns", "max_ns"):
        agg = "sum(mean_ns * launches) / nullif(sum(launches), 0)" if metric == "mean_ns" else f"avg({metric})"
    elif view == "device_hourly":
        agg = f"avg({metric})"
    else:
        agg = f"sum({metric})"
    sql = f"SELECT hour, {agg} FROM {view} WHERE {' AND '.join(where)} GROUP BY hour ORDER BY hour"
    rows = fetch_rows(con, sql, params)
    if not rows and r.signature is not None and "signature" in columns:
        # the detector's signature string may be spelled differently; fall back to the kernel
        return regression_series(con, _without_signature(r), start, end)
    return [(hour_floor(h), float(v)) for h, v in rows if v is not None]


def _without_signature(r: Regression) -> Regression:
    import dataclasses

    return dataclasses.replace(r, signature=None)


def _spec_series(con, r: Regression, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, float]] | None:
    spec = SPEC_BY_NAME.get(r.series)
    if spec is None:
        return None
    # spec SQL takes hours in (start, end]; a key the spec leaves NULL (e.g. job of a GPU series) matches any
    sql = f"""WITH r AS ({spec.sql})
              SELECT hour, sum(value * weight) / nullif(sum(weight), 0), avg(value), sum(weight) FROM r
              WHERE (job IS NULL OR ?::VARCHAR IS NULL OR job = ?) AND (kernel_id IS NULL OR ?::VARCHAR IS NULL OR kernel_id = ?)
                AND (gpu_uuid IS NULL OR ?::VARCHAR IS NULL OR gpu_uuid = ?) AND (signature IS NULL OR ?::VARCHAR IS NULL OR signature = ?)
              GROUP BY hour ORDER BY hour"""
    params = [start - dt.timedelta(hours=1), end - dt.timedelta(hours=1)]
    for key in (r.job, r.kernel_id, r.gpu_uuid, r.signature):
        params += [key, key]
    out = []
    for hour, weighted, mean, weight in fetch_rows(con, sql, params):
        if spec.min_weight and (weight or 0) < spec.min_weight:
            continue
        value = weighted if weighted is not None else mean
        if value is not None:
            out.append((hour_floor(hour), float(value)))
    return out
