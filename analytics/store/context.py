"""Loading a regression's context (analytics.context) from the warehouse.

``load_context`` reads two windows of ``hours`` hours, ``[onset - hours, onset)`` and
``[onset, onset + hours)`` (the latter ending at the run's hour), from the hourly views.
"""

from __future__ import annotations

import collections
import datetime as dt

from analytics.context import THROTTLE_MASK, DeviceStats, KernelStats, MemcpyStats, RegressionContext, Window
from analytics.results import Regression
from analytics.store.regressions import has_table
from analytics.store.schema import DUTY, SIGNATURE

#: Windows are never clipped below this many hours by a neighbouring event.
MIN_WINDOW_HOURS = 3
#: Events of the same job or GPU closer than this to the onset are the same change (the detector's dedup).
SAME_EVENT = dt.timedelta(hours=2)


def load_context(con, regression: Regression, hours: int = 24, *, clip: bool = True,
                 as_of: dt.datetime | None = None) -> RegressionContext:
    """Load ``regression``'s context from the warehouse (read-only queries).

    hours: length of each window. clip: end the windows at the onsets of the job's (or its GPUs')
    other regressions in the ``regressions`` table, so a later change (a GPU that throttles 15 hours
    after a kernel slowed down) is not blamed for this one; a window keeps at least 3 hours.
    The job's GPUs are those it ran kernels on in either window; for a per-GPU regression without
    a job the job is the one with the most kernel time on that GPU after onset.
    as_of: the hour of the run; the after window ends with it (an hourly run sees no later data,
    so the catch-up of ``cudawatch analyze`` explains an event exactly as that run did).
    """
    if hours < 1:
        raise ValueError(f"hours must be >= 1, got {hours}")
    onset = _utc(regression.onset)
    span = dt.timedelta(hours=hours)
    start, end = onset - span, onset + span
    if as_of is not None:
        end = max(min(end, _utc(as_of) + dt.timedelta(hours=1)), onset + dt.timedelta(hours=1))
    job = regression.job or _busiest_job(con, regression.gpu_uuid, onset, end)
    gpus = _job_gpus(con, job, start, end)
    if regression.gpu_uuid and regression.gpu_uuid not in gpus:
        gpus.append(regression.gpu_uuid)
    if clip:
        start, end = _clip(con, job, gpus, onset, start, end)
    before, after = _load_windows(con, regression, job, gpus, start, onset, end)
    return RegressionContext(regression, before, after)


def _clip(con, job: str, gpus: list[str], onset: dt.datetime, start: dt.datetime, end: dt.datetime):
    """Window bounds cut at the nearest other regressions of the job or its GPUs (if the table exists)."""
    if not has_table(con, "regressions"):
        return start, end
    onsets = [_utc(r[0]) for r in con.execute(
        "SELECT DISTINCT onset FROM regressions WHERE (job = ? OR gpu_uuid IN (SELECT unnest(?::VARCHAR[]))) "
        "AND onset > ? AND onset < ?", [job, gpus, start, end]).fetchall()]
    lo = onset - dt.timedelta(hours=MIN_WINDOW_HOURS)
    hi = onset + dt.timedelta(hours=MIN_WINDOW_HOURS)
    for o in onsets:
        if o <= onset - SAME_EVENT:
            start = max(start, min(o, lo))
        elif o >= onset + SAME_EVENT:
            end = min(end, max(o, hi))
    return start, end


def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc)


# --- warehouse queries (parameterised; each reads both windows at once, split by `side`) -----

_DUTY = DUTY
#: The launch signature text of analytics.store's kernel_hourly view (same expression).
_SIGNATURE = SIGNATURE
_DEVICE_SERIES = ("sm_util_pct", "sm_occupancy_pct", "tensor_util_pct", "dram_bw_util_pct", "pcie_tx_bytes_s",
                  "pcie_rx_bytes_s", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz")


def _busiest_job(con, gpu_uuid: str | None, start: dt.datetime, end: dt.datetime) -> str:
    row = con.execute(
        f"SELECT job FROM kernels WHERE gpu_uuid = ? AND window_start >= ? AND window_start < ? "
        f"GROUP BY job ORDER BY sum(total_ns / {_DUTY}) DESC LIMIT 1", [gpu_uuid, start, end]).fetchone()
    return row[0] if row else ""


def _job_gpus(con, job: str, start: dt.datetime, end: dt.datetime) -> list[str]:
    rows = con.execute("SELECT DISTINCT gpu_uuid FROM kernels WHERE job = ? AND window_start >= ? AND window_start < ? "
                       "AND gpu_uuid IS NOT NULL ORDER BY 1", [job, start, end]).fetchall()
    return [r[0] for r in rows]


def _sides(rows, n_key: int = 0) -> tuple[dict, dict]:
    """Split rows whose first column is the side (False: before, True: after) into two dicts by key."""
    out: tuple[dict, dict] = ({}, {})
    for row in rows:
        key = row[1 : 1 + n_key] if n_key > 1 else (row[1] if n_key == 1 else None)
        out[1 if row[0] else 0][key] = row[1 + n_key :]
    return out


def _by_grouping_set(rows) -> collections.defaultdict:
    """Rows ``(side, GROUPING(...), *columns)`` of a GROUPING SETS query by their GROUPING value (a bit
    set per column, 1 where the set does not group by it, the first column the highest bit), each as
    ``(0 before / 1 after, *columns)``."""
    out: collections.defaultdict = collections.defaultdict(list)
    for side, grouping, *cols in rows:
        out[grouping].append((1 if side else 0, *cols))
    return out


def _series(con, r: Regression, job: str, start, mid, end) -> tuple[dict, dict]:
    """The regression's own series, hourly, for the series names analytics.detect emits."""
    name = r.series
    if name.startswith("kernel_") and r.kernel_id:
        value = {"kernel_launches": f"sum(launches / {_DUTY})", "kernel_busy_s": f"sum(total_ns / {_DUTY}) / 1e9",
                 "kernel_mean_ns": "sum(total_ns) / nullif(sum(launches), 0)",
                 "kernel_id_mean_ns": "sum(total_ns) / nullif(sum(launches), 0)"}.get(name)
        if value is None:
            return {}, {}  # a series this loader does not know (e.g. shares): the rules do not need it
        sig = f" AND {_SIGNATURE} = ?" if r.signature and name == "kernel_mean_ns" else ""
        sql = (f"SELECT window_start >= ? AS side, date_trunc('hour', window_start) AS hour, {value} FROM kernels "
               f"WHERE job = ? AND kernel_id = ?{sig} AND window_start >= ? AND window_start < ? GROUP BY ALL ORDER BY hour")
        params = [mid, job, r.kernel_id] + ([r.signature] if sig else []) + [start, end]
    elif name.startswith("job_"):
        value = f"sum(launches / {_DUTY})" if "launches" in name else f"sum(total_ns / {_DUTY}) / 1e9"
        sql = (f"SELECT window_start >= ? AS side, date_trunc('hour', window_start) AS hour, {value} FROM kernels "
               f"WHERE job = ? AND window_start >= ? AND window_start < ? GROUP BY ALL ORDER BY hour")
        params = [mid, job, start, end]
    elif name.startswith("gpu_") and name[4:] in _DEVICE_SERIES and r.gpu_uuid:
        sql = (f"SELECT ts >= ? AS side, date_trunc('hour', ts) AS hour, avg({name[4:]}) FROM device "
               f"WHERE gpu_uuid = ? AND ts >= ? AND ts < ? GROUP BY ALL ORDER BY hour")
        params = [mid, r.gpu_uuid, start, end]
    else:
        return {}, {}
    return _sides(con.execute(sql, params).fetchall(), 1)


def _kernels(con, job: str, start, mid, end) -> tuple[dict, dict]:
    """Per signature and side: the kernel_hourly view's numbers, computed from the job's rows only."""
    rows = con.execute(
        f"""WITH h AS (
              SELECT window_start >= ? AS side, date_trunc('hour', window_start) AS hour, kernel_id, any_value(kernel) AS kernel,
                     grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, shared_mem_bytes,
                     sum(launches / {_DUTY}) AS launches, sum(total_ns / {_DUTY}) AS total_ns,
                     sum(total_ns) / nullif(sum(launches), 0) AS mean_ns
              FROM kernels WHERE job = ? AND window_start >= ? AND window_start < ? GROUP BY ALL)
            SELECT side, kernel_id, {_SIGNATURE}, any_value(kernel), grid_x, grid_y, grid_z, block_x, block_y, block_z,
                   registers_per_thread, shared_mem_bytes, sum(launches), sum(total_ns), list(mean_ns ORDER BY hour),
                   list(launches ORDER BY hour),
                   list((epoch(hour) - epoch(CASE WHEN side THEN ?::TIMESTAMPTZ ELSE ?::TIMESTAMPTZ END))::BIGINT // 3600 ORDER BY hour)
            FROM h GROUP BY ALL ORDER BY 2, 3""",
        [mid, job, start, end, mid, start]).fetchall()
    out: tuple[list, list] = ([], [])
    for r in rows:
        out[1 if r[0] else 0].append(KernelStats(
            kernel_id=r[1], kernel=r[3], signature=r[2], launches=float(r[12] or 0), total_ns=float(r[13] or 0),
            hourly_mean_ns=tuple(float(v) for v in r[14] if v is not None),
            hourly_launches=tuple(float(v or 0) for v in r[15]), config=tuple(r[4:12]), hour_index=tuple(int(v) for v in r[16])))
    return {"kernels": tuple(out[0])}, {"kernels": tuple(out[1])}


def _memcpy(con, job: str, start, mid, end) -> tuple[dict, dict]:
    rows = con.execute(
        f"""WITH h AS (
              SELECT window_start >= ? AS side, date_trunc('hour', window_start) AS hour, copy_kind, src_kind, dst_kind,
                     sum(count / {_DUTY}) AS count, sum(bytes / {_DUTY}) AS bytes, sum(total_ns / {_DUTY}) AS total_ns,
                     sum(bytes) / nullif(sum(total_ns), 0) AS bytes_per_ns
              FROM memcpy WHERE job = ? AND window_start >= ? AND window_start < ? GROUP BY ALL)
            SELECT side, copy_kind, src_kind, dst_kind, sum(count), sum(bytes), sum(total_ns), list(bytes_per_ns ORDER BY hour)
            FROM h GROUP BY ALL ORDER BY 2, 3, 4""", [mid, job, start, end]).fetchall()
    out: tuple[list, list] = ([], [])
    for r in rows:
        out[1 if r[0] else 0].append(MemcpyStats(r[1], r[2], r[3], float(r[4] or 0), float(r[5] or 0), float(r[6] or 0),
                                                 tuple(float(v) for v in r[7] if v is not None)))
    return {"memcpy": tuple(out[0])}, {"memcpy": tuple(out[1])}


def _devices(con, gpus: list[str], start, mid, end) -> tuple[dict, dict]:
    if not gpus:
        return {"devices": {}}, {"devices": {}}
    rows = con.execute(
        f"SELECT ts >= ? AS side, gpu_uuid, count(*), avg(sm_clock_mhz), avg(sm_util_pct), avg(dram_bw_util_pct), "
        f"avg(tensor_util_pct), avg(sm_occupancy_pct), avg(greatest(pcie_tx_bytes_s, pcie_rx_bytes_s)), avg(power_w), "
        f"avg(temp_c), avg(CASE WHEN coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK} <> 0 THEN 1.0 ELSE 0.0 END), "
        f"bit_or(coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK}), any_value(gpu_model), any_value(host) "
        f"FROM device WHERE gpu_uuid IN (SELECT unnest(?::VARCHAR[])) AND ts >= ? AND ts < ? GROUP BY ALL",
        [mid, gpus, start, end]).fetchall()
    out: tuple[dict, dict] = ({}, {})
    for r in rows:
        out[1 if r[0] else 0][r[1]] = DeviceStats(
            r[1], int(r[2]), *(None if v is None else float(v) for v in r[3:11]), throttle_frac=float(r[11] or 0),
            reasons=int(r[12] or 0), gpu_model=r[13], host=r[14])
    return {"devices": out[0]}, {"devices": out[1]}


def _job_totals(con, job: str, gpus: list[str], start, mid, end) -> tuple[dict, dict]:
    """Per side: per-GPU kernel totals, hours, busy and wall seconds, other jobs, health counters.

    Four queries: the job's launch and time sums and its distinct windows, each with GROUPING SETS
    (per side, per side and GPU or kernel, per side and hour); the other jobs' time on its GPUs (per
    side, per side and GPU); health."""
    params = [mid, job, start, end]
    where = "job = ? AND window_start >= ? AND window_start < ?"
    # Launches and kernel time: per side, per (side, GPU, kernel), per (side, hour).
    sums = _by_grouping_set(con.execute(
        f"SELECT side, GROUPING(gpu_uuid, kernel_id, hour), gpu_uuid, kernel_id, hour, sum(n), sum(t) FROM "
        f"(SELECT window_start >= ? AS side, gpu_uuid, kernel_id, date_trunc('hour', window_start) AS hour, "
        f"launches / {_DUTY} AS n, total_ns / {_DUTY} AS t FROM kernels WHERE {where}) "
        f"GROUP BY GROUPING SETS ((side), (side, gpu_uuid, kernel_id), (side, hour))", params).fetchall())
    busy_s, hours = [0.0, 0.0], [0, 0]
    for i, _, _, _, _, t in sums[0b111]:
        busy_s[i] = float(t or 0) / 1e9
    gk: tuple[dict, dict] = ({}, {})
    for i, g, k, _, n, t in sums[0b001]:
        if g is not None:
            gk[i][(g, k)] = (float(n or 0), float(t or 0))
    hourly: tuple[dict, dict] = ({}, {})
    for i, _, _, hour, n, t in sums[0b110]:
        hours[i] += 1
        hourly[i][_utc(hour)] = [float(t or 0) / 1e9, 0.0, float(n or 0)]
    # Observed wall seconds (each window once): per side, per (side, GPU), per (side, hour).
    walls = _by_grouping_set(con.execute(
        f"SELECT side, GROUPING(gpu_uuid, hour), gpu_uuid, hour, sum(window_s) FROM "
        f"(SELECT DISTINCT window_start >= ? AS side, date_trunc('hour', window_start) AS hour, run_id, pid, gpu_uuid, "
        f"window_start, window_s FROM kernels WHERE {where}) "
        f"GROUP BY GROUPING SETS ((side), (side, gpu_uuid), (side, hour))", params).fetchall())
    wall_s = [0.0, 0.0]
    for i, _, _, w in walls[0b11]:
        wall_s[i] = float(w or 0)
    gpu_wall: tuple[dict, dict] = ({}, {})
    for i, g, _, w in walls[0b01]:
        if g is not None:
            gpu_wall[i][g] = float(w or 0)
    for i, _, hour, w in walls[0b10]:
        hourly[i].setdefault(_utc(hour), [0.0, 0.0, 0.0])[1] = float(w or 0)
    # Other jobs' kernel time on the job's GPUs: per side (and how many jobs), per (side, GPU).
    others = _by_grouping_set(con.execute(
        f"SELECT window_start >= ? AS side, GROUPING(gpu_uuid), gpu_uuid, sum(total_ns / {_DUTY}) / 1e9, count(DISTINCT job) "
        f"FROM kernels WHERE gpu_uuid IN (SELECT unnest(?::VARCHAR[])) AND job <> ? AND window_start >= ? AND window_start < ? "
        f"GROUP BY GROUPING SETS ((side), (side, gpu_uuid))", [mid, gpus, job, start, end]).fetchall())
    other = [(0.0, 0), (0.0, 0)]
    for i, _, b, jobs in others[1]:
        other[i] = (float(b or 0), int(jobs))
    gpu_other: tuple[dict, dict] = ({}, {})
    for i, g, b, _ in others[0]:
        gpu_other[i][g] = float(b or 0)
    health = _sides(con.execute(f"SELECT window_start >= ?, sum(records), sum(dropped_records) FROM health WHERE {where} GROUP BY ALL",
                                params).fetchall())
    out = []
    for i in (0, 1):
        records, dropped = health[i].get(None, (0, 0))
        out.append({"gpu_kernels": gk[i], "hours": hours[i], "busy_s": busy_s[i], "wall_s": wall_s[i],
                    "other_busy_s": other[i][0], "other_jobs": other[i][1],
                    "records": int(records or 0), "dropped_records": int(dropped or 0),
                    "gpu_wall_s": gpu_wall[i], "gpu_other_busy_s": gpu_other[i],
                    "hourly_busy_s": {h: v[0] for h, v in hourly[i].items()},
                    "hourly_wall_s": {h: v[1] for h, v in hourly[i].items()},
                    "hourly_launches": {h: v[2] for h, v in hourly[i].items()}})
    return out[0], out[1]


def _load_windows(con, r: Regression, job: str, gpus: list[str], start, mid, end) -> tuple[Window, Window]:
    parts = [({"start": start, "end": mid}, {"start": mid, "end": end})]
    series = _series(con, r, job, start, mid, end)
    parts.append(tuple({"series": tuple(float(v[0]) for _, v in sorted(side.items()) if v[0] is not None)} for side in series))
    parts += [_kernels(con, job, start, mid, end), _memcpy(con, job, start, mid, end), _devices(con, gpus, start, mid, end),
              _job_totals(con, job, gpus, start, mid, end)]
    before, after = {}, {}
    for b, a in parts:
        before.update(b)
        after.update(a)
    return Window(**before), Window(**after)
