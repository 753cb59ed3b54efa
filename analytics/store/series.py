"""The hourly series cudawatch watches, and loading them from the warehouse as a matrix.

Each ``SeriesSpec`` is one SQL query over the hourly views (analytics/store/schema.py) that yields
``(hour, job, kernel, kernel_id, gpu_uuid, signature, value, weight)`` rows; ``load_matrix`` turns
the rows of a trailing window into a (series x hours) float matrix with NaN for missing hours, so
baselines and detection work on arrays, not rows.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from dataclasses import dataclass

import numpy as np

HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True)
class SeriesSpec:
    """One family of series.

    name: the ``Regression.series`` value. bad: +1 when a rise is a regression, -1 when a fall is.
    period: seasonal period in hours (24 for load-driven series), None for none.
    min_weight: points whose weight (launches, samples) is below this are missing (sparse kernels).
    kernel_level: series of one kernel (its severity is scaled by its share of the job's GPU time).
    sql: rows for hours in (? , ?] (start exclusive, end inclusive).
    sequential: the hourly path may test it with the sequential detector once it has a week of
    history (False: change points only, e.g. clocks pinned at discrete values).
    steps: how a step is found off the sequential path: "level" (change points) or "absence" (a 0/1
    series whose current run of zeros is longer than its history makes plausible:
    analytics.presence).
    """

    name: str
    bad: int
    period: int | None
    min_weight: float
    kernel_level: bool
    sql: str
    sequential: bool = True
    steps: str = "level"


_COLS = "hour, job, kernel, kernel_id, gpu_uuid, signature, value, weight"

_SHARE_SQL = """
        WITH k AS (SELECT hour, job, kernel_id, any_value(kernel) AS kernel, sum({num}) AS num, sum(launches) AS launches
                   FROM kernel_hourly WHERE hour > ? AND hour <= ? GROUP BY ALL),
             j AS (SELECT hour, job, sum(num) AS total FROM k GROUP BY ALL),
             keys AS (SELECT job, kernel_id, any_value(kernel) AS kernel FROM k GROUP BY ALL)
        SELECT j.hour, keys.job, keys.kernel, keys.kernel_id, NULL::VARCHAR AS gpu_uuid, NULL::VARCHAR AS signature,
               {value}::DOUBLE AS value, coalesce(k.launches, 0)::DOUBLE AS weight
        FROM keys JOIN j USING (job) LEFT JOIN k ON k.hour = j.hour AND k.job = keys.job AND k.kernel_id = keys.kernel_id"""
_SHARE = "(coalesce(k.num, 0) / nullif(j.total, 0))"

SPECS: tuple[SeriesSpec, ...] = (
    # Mean per-launch duration of one launch configuration of a kernel.
    SeriesSpec("kernel_mean_ns", +1, None, 20.0, True, f"""
        SELECT {_COLS} FROM (
          SELECT hour, job, kernel, kernel_id, NULL::VARCHAR AS gpu_uuid, signature,
                 mean_ns::DOUBLE AS value, launches::DOUBLE AS weight
          FROM kernel_hourly WHERE hour > ? AND hour <= ?)"""),
    # Mean per-launch duration of a kernel over all its launch configurations: a launch
    # configuration change ends one signature series and starts another; this series spans both.
    SeriesSpec("kernel_id_mean_ns", +1, None, 20.0, True, f"""
        SELECT {_COLS} FROM (
          SELECT hour, job, any_value(kernel) AS kernel, kernel_id, NULL::VARCHAR AS gpu_uuid, NULL::VARCHAR AS signature,
                 (sum(mean_ns * launches) / nullif(sum(launches), 0))::DOUBLE AS value, sum(launches)::DOUBLE AS weight
          FROM kernel_hourly WHERE hour > ? AND hour <= ? GROUP BY hour, job, kernel_id)"""),
    # A kernel's share of its job's GPU time and of its job's launches in each hour (0 in hours the
    # job ran without it). Shares cancel the job's load (diurnal cycles, more or fewer GPUs), so they
    # need no seasonal model: they catch new kernels, more launches and costlier launch configurations.
    SeriesSpec("kernel_time_share", +1, None, 0.0, True, _SHARE_SQL.format(num="total_ns", value=_SHARE)),
    SeriesSpec("kernel_launch_share", +1, None, 0.0, True, _SHARE_SQL.format(num="launches", value=_SHARE)),
    # Presence of a kernel in the hours its job ran: 1 when it launched, 0 when the job ran without
    # it. A kernel that ran every hour and stops (a code path removed, a fused kernel replaced)
    # falls to 0, which no share series shows as bad (its share falls, the others' rise a little).
    # A 0/1 series: neither change points nor the sequential detector, but the absent-run rule of
    # analytics.presence (a kernel that runs in some hours only is not a vanished kernel).
    SeriesSpec("kernel_presence", -1, None, 0.0, True,
               _SHARE_SQL.format(num="launches", value="(coalesce(k.launches, 0) > 0)"), sequential=False, steps="absence"),
    # GPU busy seconds per hour of a job (load-driven: analysed once three days allow a daily profile).
    SeriesSpec("job_gpu_busy_s", +1, 24, 0.0, False, """
        SELECT hour, job, NULL::VARCHAR AS kernel, NULL::VARCHAR AS kernel_id, NULL::VARCHAR AS gpu_uuid,
               NULL::VARCHAR AS signature, gpu_busy_s::DOUBLE AS value, launches::DOUBLE AS weight
        FROM job_hourly WHERE hour > ? AND hour <= ?"""),
    # Share of a job's GPU time its kernels kept the GPUs busy: busy seconds / the GPU seconds the
    # collectors observed in the hour (job_hourly.observed_gpu_s: kernel and health windows per
    # GPU, so a GPU watched for part of an hour is not a fall). It falls when the GPUs wait between
    # kernels (idle gaps: host- or input-bound) or when a kernel stops running while the wall time
    # stays: a fall is bad. Daily
    # cycle (inference load): analysed from three days of data on, like job_gpu_busy_s.
    SeriesSpec("job_busy_share", -1, 24, 0.0, False, """
        SELECT hour, job, NULL::VARCHAR AS kernel, NULL::VARCHAR AS kernel_id, NULL::VARCHAR AS gpu_uuid,
               NULL::VARCHAR AS signature, (gpu_busy_s / nullif(observed_gpu_s, 0))::DOUBLE AS value, launches::DOUBLE AS weight
        FROM job_hourly WHERE hour > ? AND hour <= ?"""),
    # Copy time per byte of a job's memory copies of one kind (HtoD, DtoH, ...): pageable host
    # memory or a slower link shows here. The copy kind is reported as the signature.
    SeriesSpec("memcpy_ns_per_byte", +1, None, 1.0, False, """
        SELECT hour, job, NULL::VARCHAR AS kernel, NULL::VARCHAR AS kernel_id, NULL::VARCHAR AS gpu_uuid,
               copy_kind AS signature, (sum(total_ns) / nullif(sum(bytes), 0))::DOUBLE AS value, sum(count)::DOUBLE AS weight
        FROM memcpy_hourly WHERE hour > ? AND hour <= ? GROUP BY hour, job, copy_kind"""),
    # Device counters per GPU: a throttled GPU shows a lower SM clock.
    SeriesSpec("gpu_sm_clock_mhz", -1, None, 1.0, False, """
        SELECT hour, NULL::VARCHAR AS job, NULL::VARCHAR AS kernel, NULL::VARCHAR AS kernel_id, gpu_uuid,
               NULL::VARCHAR AS signature, sm_clock_mhz::DOUBLE AS value, samples::DOUBLE AS weight
        FROM device_hourly WHERE hour > ? AND hour <= ? AND sm_clock_mhz IS NOT NULL""", sequential=False),
    SeriesSpec("gpu_mem_clock_mhz", -1, None, 1.0, False, """
        SELECT hour, NULL::VARCHAR AS job, NULL::VARCHAR AS kernel, NULL::VARCHAR AS kernel_id, gpu_uuid,
               NULL::VARCHAR AS signature, mem_clock_mhz::DOUBLE AS value, samples::DOUBLE AS weight
        FROM device_hourly WHERE hour > ? AND hour <= ? AND mem_clock_mhz IS NOT NULL""", sequential=False),
)

SPEC_BY_NAME = {s.name: s for s in SPECS}


@dataclass
class SeriesMatrix:
    """Series of one spec over ``hours`` consecutive UTC hours ending at ``end`` (inclusive).

    keys[i] = (job, kernel, kernel_id, gpu_uuid, signature); values/weights are (len(keys), hours).
    """

    spec: SeriesSpec
    end: dt.datetime
    keys: list[tuple]
    values: np.ndarray
    weights: np.ndarray

    @property
    def hours(self) -> int:
        return self.values.shape[1]

    def hour_at(self, index: int) -> dt.datetime:
        return self.end - (self.hours - 1 - index) * HOUR

    def index_of(self, hour: dt.datetime) -> int:
        """Column of ``hour`` (``hour_at``'s inverse; negative before the first column)."""
        return self.hours - 1 - int((self.end - hour) / HOUR)


def series_key(name: str, key: tuple) -> str:
    """Stable text key of one series: ``name|job|kernel_id|gpu_uuid|signature``."""
    job, _kernel, kernel_id, gpu_uuid, signature = key
    return "|".join([name] + ["" if v is None else str(v) for v in (job, kernel_id, gpu_uuid, signature)])


_cache: contextvars.ContextVar[dict | None] = contextvars.ContextVar("cudawatch_matrix_cache", default=None)


@contextlib.contextmanager
def shared_matrices():
    """Within the block, ``load_matrix`` answers a repeated (connection, spec, end, hours) from
    memory: the baselines and the detector of one hour read the same series. Use it only around
    code that does not change the raw tables (app.hour.run_hour's analysis stages)."""
    token = _cache.set({})
    try:
        yield
    finally:
        _cache.reset(token)


def load_matrix(con, spec: SeriesSpec, end: dt.datetime, hours: int) -> SeriesMatrix:
    """Rows of ``spec`` for the ``hours`` hours ending at ``end`` as a matrix (points below the
    spec's ``min_weight`` become NaN)."""
    end = end.astimezone(dt.timezone.utc) if end.tzinfo else end.replace(tzinfo=dt.timezone.utc)
    cache = _cache.get()
    if cache is not None:
        key = (id(con), spec.name, end, hours)
        if key not in cache:
            cache[key] = _load_matrix(con, spec, end, hours)
        return cache[key]
    return _load_matrix(con, spec, end, hours)


def _load_matrix(con, spec: SeriesSpec, end: dt.datetime, hours: int) -> SeriesMatrix:
    start = end - hours * HOUR
    sql = f"""
        WITH r AS ({spec.sql})
        SELECT dense_rank() OVER (ORDER BY job, kernel_id, gpu_uuid, signature) - 1 AS sid,
               ((epoch(hour) - epoch(?::TIMESTAMPTZ)) / 3600)::BIGINT - 1 AS h,
               job, kernel, kernel_id, gpu_uuid, signature, value, weight
        FROM r"""
    tbl = con.execute(sql, [start, end, start]).fetchnumpy()
    if len(tbl["sid"]) == 0:
        empty = np.empty((0, hours))
        return SeriesMatrix(spec, end, [], empty, empty.copy())
    sid = np.asarray(tbl["sid"], dtype=np.int64)
    h = np.asarray(tbl["h"], dtype=np.int64)
    val = np.ma.filled(np.ma.asarray(tbl["value"], dtype=float), np.nan)
    wt = np.ma.filled(np.ma.asarray(tbl["weight"], dtype=float), 0.0)
    n = int(sid.max()) + 1
    values = np.full((n, hours), np.nan)
    weights = np.zeros((n, hours))
    ok = (h >= 0) & (h < hours)
    values[sid[ok], h[ok]] = val[ok]
    weights[sid[ok], h[ok]] = np.nan_to_num(wt[ok])
    if spec.min_weight > 0:
        values[weights < spec.min_weight] = np.nan
    _, first = np.unique(sid, return_index=True)
    cols = [_objects(tbl[c]) for c in ("job", "kernel", "kernel_id", "gpu_uuid", "signature")]
    keys = [tuple(col[i] for col in cols) for i in first]
    return SeriesMatrix(spec, end, keys, values, weights)


def _objects(col) -> list:
    """A fetched column as Python objects with None for NULL (fetchnumpy masks NULLs)."""
    mask = np.ma.getmaskarray(col)
    data = np.ma.getdata(col)
    return [None if m else v for v, m in zip(data.tolist(), mask.tolist())]
