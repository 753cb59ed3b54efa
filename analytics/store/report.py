"""What a report shows, read from the warehouse: one function per report section.

Every function takes a DuckDB connection (from ``analytics.store.connect``) and a UTC window
``[start, end)`` and returns plain Python values; no HTML here. SQL reads the hourly views
(``kernel_hourly``, ``job_hourly``, ``device_hourly``) and the raw ``device``, ``health``,
``shard_ledger`` and ``quarantine`` tables described in docs/warehouse.md. A missing table or view
degrades to an empty section (the report then says what to collect) instead of failing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field

import duckdb

from cudawatch.shards import hour_floor

UTC = dt.timezone.utc

#: NVML clocks-event reasons that mean the GPU was slowed down (power cap, HW slowdown, SW/HW
#: thermal, power brake): nvmlClocksEventReasons 0x4 | 0x8 | 0x20 | 0x40 | 0x80.
THROTTLE_MASK = 0x04 | 0x08 | 0x20 | 0x40 | 0x80
THROTTLE_REASONS = {0x04: "power cap", 0x08: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "power brake"}

_SHARD_NAME = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)-(?P<uuid>[0-9a-f]{12})\.parquet$")


def fetch_rows(con, sql: str, params=()) -> list[tuple]:
    """Rows of ``sql``; [] while a table or view it reads does not exist yet (a new warehouse)."""
    try:
        return con.execute(sql, list(params)).fetchall()
    except duckdb.CatalogException:
        return []


def _dicts(con, sql: str, params=()) -> list[dict]:
    try:
        cur = con.execute(sql, list(params))
    except duckdb.CatalogException:
        return []
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def day_window(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + dt.timedelta(days=1)


def data_extent(con) -> tuple[dt.datetime | None, dt.datetime | None]:
    """First and last UTC hour with kernel or device data."""
    row = fetch_rows(
        con,
        "SELECT min(t), max(t) FROM (SELECT window_start AS t FROM kernels UNION ALL SELECT ts FROM device)",
    )
    if not row or row[0][0] is None:
        return None, None
    first, last = row[0]
    return _hour(first), _hour(last)


def last_day(con) -> dt.date | None:
    """The last UTC day with data (the report's default day)."""
    _, last = data_extent(con)
    return last.date() if last else None


_hour = hour_floor


@dataclass
class FleetSummary:
    hosts: int = 0
    gpus: int = 0
    jobs: int = 0
    kernels: int = 0
    gpu_busy_hours: float = 0.0
    gpu_hours_observed: float = 0.0
    launches: float = 0.0
    hours_with_data: int = 0

    @property
    def busy_pct(self) -> float | None:
        return 100.0 * self.gpu_busy_hours / self.gpu_hours_observed if self.gpu_hours_observed else None


def fleet_summary(con, start: dt.datetime, end: dt.datetime) -> FleetSummary:
    """Fleet size, jobs and GPU hours in ``[start, end)``. GPU busy hours = kernel time (scaled by
    1/sampling_duty) / 3600; observed GPU hours = distinct (GPU, hour) pairs seen by kernels or
    the agent."""
    s = FleetSummary()
    k = fetch_rows(
        con,
        """SELECT count(DISTINCT job), count(DISTINCT kernel_id),
                  sum(total_ns / coalesce(nullif(sampling_duty, 0), 1)) / 3.6e12,
                  sum(launches / coalesce(nullif(sampling_duty, 0), 1))
           FROM kernels WHERE window_start >= ? AND window_start < ?""",
        (start, end),
    )
    if k and k[0][0] is not None:
        s.jobs, s.kernels, s.gpu_busy_hours, s.launches = k[0][0], k[0][1], float(k[0][2] or 0), float(k[0][3] or 0)
    g = fetch_rows(
        con,
        """WITH seen AS (
               SELECT host, gpu_uuid, date_trunc('hour', window_start) AS h FROM kernels
               WHERE window_start >= ? AND window_start < ? AND gpu_uuid IS NOT NULL
               UNION SELECT host, gpu_uuid, date_trunc('hour', ts) FROM device WHERE ts >= ? AND ts < ?)
           SELECT count(DISTINCT host), count(DISTINCT gpu_uuid), count(DISTINCT (gpu_uuid, h)), count(DISTINCT h) FROM seen""",
        (start, end, start, end),
    )
    if g:
        s.hosts, s.gpus, s.gpu_hours_observed, s.hours_with_data = g[0][0], g[0][1], float(g[0][2]), g[0][3]
    return s


def top_kernels(con, start: dt.datetime, end: dt.datetime, n: int = 10) -> list[dict]:
    """The ``n`` kernels with the most GPU time in the window, with their share of all kernel time,
    launches and mean duration per launch (µs)."""
    return _dicts(
        con,
        """WITH k AS (
               SELECT job, kernel_id, any_value(kernel) AS kernel, sum(total_ns) AS busy_ns,
                      sum(launches) AS launches, sum(total_ns) / 3.6e12 AS gpu_hours,
                      count(DISTINCT signature) AS configs
               FROM kernel_hourly WHERE hour >= ? AND hour < ? GROUP BY job, kernel_id)
           SELECT job, kernel_id, kernel, gpu_hours, launches, configs,
                  busy_ns / nullif(launches, 0) / 1e3 AS mean_us,
                  busy_ns / nullif(sum(busy_ns) OVER (), 0) AS share
           FROM k ORDER BY busy_ns DESC, job, kernel_id LIMIT ?""",
        (start, end, n),
    )


def job_table(con, start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per job: GPUs, GPU busy hours, launches and kernels in the window."""
    return _dicts(
        con,
        """SELECT job, max(gpus) AS gpus, sum(gpu_busy_s) / 3600 AS gpu_hours, sum(launches) AS launches,
                  max(kernels) AS kernels, count(*) AS hours
           FROM job_hourly WHERE hour >= ? AND hour < ? GROUP BY job ORDER BY gpu_hours DESC, job""",
        (start, end),
    )


@dataclass
class UtilGrid:
    """Mean SM utilisation (%) per GPU (rows) and UTC hour (columns); NaN where no sample."""

    gpus: list[str] = field(default_factory=list)
    hours: list[dt.datetime] = field(default_factory=list)
    values: list[list[float]] = field(default_factory=list)


def utilisation_grid(con, start: dt.datetime, end: dt.datetime) -> UtilGrid:
    rows = fetch_rows(
        con,
        """SELECT host, gpu_index, gpu_uuid, hour, sm_util_pct FROM device_hourly
           WHERE hour >= ? AND hour < ? ORDER BY host, gpu_index, gpu_uuid, hour""",
        (start, end),
    )
    grid = UtilGrid()
    if not rows:
        return grid
    hours = sorted({_hour(r[3]) for r in rows})
    first, last = hours[0], hours[-1]
    grid.hours = [first + dt.timedelta(hours=i) for i in range(int((last - first).total_seconds() // 3600) + 1)]
    col = {h: i for i, h in enumerate(grid.hours)}
    index: dict[str, int] = {}
    for host, gpu_index, uuid, hour, util in rows:
        label = f"{host}:{gpu_index}" if gpu_index is not None else f"{host}:{uuid}"
        if label not in index:
            index[label] = len(grid.gpus)
            grid.gpus.append(label)
            grid.values.append([math.nan] * len(grid.hours))
        grid.values[index[label]][col[_hour(hour)]] = float(util) if util is not None else math.nan
    return grid


def gpu_health(con, start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per GPU: mean SM utilisation, power, SM clock, max temperature and the share of samples
    with a throttling clocks-event reason (see THROTTLE_MASK), worst first."""
    rows = _dicts(
        con,
        f"""SELECT host, gpu_index, gpu_uuid, any_value(gpu_model) AS gpu_model, count(*) AS samples,
                   avg(sm_util_pct) AS sm_util_pct, avg(power_w) AS power_w, max(temp_c) AS temp_max_c,
                   avg(sm_clock_mhz) AS sm_clock_mhz,
                   avg(CASE WHEN (coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK}) <> 0 THEN 1.0 ELSE 0.0 END) AS throttled,
                   bit_or(coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK}) AS reasons
            FROM device WHERE ts >= ? AND ts < ?
            GROUP BY host, gpu_index, gpu_uuid ORDER BY throttled DESC, sm_util_pct ASC, host, gpu_index""",
        (start, end),
    )
    for r in rows:
        r["reasons"] = ", ".join(name for bit, name in THROTTLE_REASONS.items() if (r["reasons"] or 0) & bit)
    return rows


def collector_health(con, start: dt.datetime, end: dt.datetime, budget_pct: float = 2.0) -> list[dict]:
    """Per job, from the collector's ``health`` rows: processes, records, dropped records (and
    their share), mean and max estimated overhead, windows over the overhead budget, and the data
    quality of health v2 (records without usable timestamps, windows where records arrived but
    none were valid: their kernel data is missing, not zero; null in v1 rows)."""
    return _dicts(
        con,
        """SELECT job, count(DISTINCT run_id) AS processes, count(DISTINCT host) AS hosts,
                  sum(records) AS records, sum(dropped_records) AS dropped,
                  sum(dropped_records) / nullif(sum(records) + sum(dropped_records), 0) AS dropped_share,
                  avg(overhead_pct) AS overhead_mean, max(overhead_pct) AS overhead_max,
                  count(*) FILTER (WHERE overhead_pct > ?) AS windows_over_budget, count(*) AS windows,
                  avg(sampling_duty) AS duty,
                  sum(coalesce(invalid_zero_timestamp, 0) + coalesce(invalid_end_before_start, 0)) AS invalid,
                  count(*) FILTER (WHERE data_quality = 'error') AS error_windows,
                  sum(coalesce(collector_errors, 0)) AS collector_errors,
                  arg_max(last_error, window_start) FILTER (WHERE last_error IS NOT NULL) AS last_error
           FROM health WHERE window_start >= ? AND window_start < ?
           GROUP BY job ORDER BY error_windows DESC, dropped DESC, overhead_max DESC, job""",
        (budget_pct, start, end),
    )


@dataclass
class DataGaps:
    """Hours in the window where a table, or a host that wrote it that day, has no shard."""

    missing: list[dict] = field(default_factory=list)  # {table, host, hours: [datetime], ...}
    quarantined: list[dict] = field(default_factory=list)
    expected_hours: int = 0

    @property
    def empty(self) -> bool:
        return not self.missing and not self.quarantined


def data_gaps(con, start: dt.datetime, end: dt.datetime, last_hour: dt.datetime | None = None) -> DataGaps:
    """Missing shards per (table, host), from ``shard_ledger.partition_hour``: for ``device`` (the
    node agent runs all the time) every hour of the window without a shard from a host that wrote
    device shards that day; for the per-process tables (kernels, memcpy, health) the hours without a
    shard between the host's first and last shard of the day (jobs start and stop). Plus the
    quarantined shards of the window with their reasons. Hours after ``last_hour`` (the newest
    data) are not expected yet."""
    gaps = DataGaps()
    stop = min(end, last_hour + dt.timedelta(hours=1)) if last_hour else end
    expected = []
    h = start
    while h < stop:
        expected.append(h)
        h += dt.timedelta(hours=1)
    gaps.expected_hours = len(expected)
    seen: dict[tuple[str, str], set[dt.datetime]] = {}
    for path, table, hour in fetch_rows(
        con,
        "SELECT path, table_name, partition_hour FROM shard_ledger WHERE partition_hour >= ? AND partition_hour < ?",
        (start, end),
    ):
        m = _SHARD_NAME.match(path.rsplit("/", 1)[-1])
        host = m.group("host") if m else "?"
        seen.setdefault((table, host), set()).add(_hour(hour))
    tables: dict[str, set[dt.datetime]] = {}
    for (table, host), hours in seen.items():
        tables.setdefault(table, set()).update(hours)
    for (table, host), hours in sorted(seen.items()):
        window = expected
        if table != "device":
            # process tables: a job that starts or ends mid-day is not a gap; a hole between a
            # host's first and last hour of the table is
            window = [h for h in expected if min(hours) <= h <= max(hours)]
        missing = [h for h in window if h not in hours]
        if missing:
            gaps.missing.append({"table": table, "host": host, "hours": missing, "ranges": hour_ranges(missing)})
    for q in _dicts(con, "SELECT path, table_name, reason, bytes, quarantined_at FROM quarantine ORDER BY path"):
        hour = _partition_of(q["path"])
        if hour is None or start <= hour < end:
            q["hour"] = hour
            gaps.quarantined.append(q)
    return gaps


def _partition_of(path: str) -> dt.datetime | None:
    m = re.search(r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})", path)
    return dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:00:00+00:00") if m else None


def hour_ranges(hours: list[dt.datetime]) -> str:
    """``[01:00, 02:00, 03:00, 07:00]`` -> ``"01:00–03:59, 07:00–07:59"`` (UTC)."""
    out, run = [], []
    for h in sorted(hours):
        if run and h - run[-1] != dt.timedelta(hours=1):
            out.append(run)
            run = []
        run.append(h)
    if run:
        out.append(run)
    return ", ".join(f"{r[0]:%H:00}–{r[-1]:%H:59}" if len(r) > 1 else f"{r[0]:%H:00}–{r[0]:%H:59}" for r in out)


# --- the time series behind one regression ---------------------------------------------------
