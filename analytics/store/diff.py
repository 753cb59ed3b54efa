"""Trace diff of one job between two windows: kernels added, removed, slower, faster, same.

Modelled on Holistic Trace Analysis' trace diff (``TraceDiff.compare_traces``: per-kernel counts
and durations of a control and a test trace, with ops added and removed), computed here from the
hourly kernel aggregates in the warehouse instead of two raw traces. Backs ``cudawatch diff``.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from analytics.store.schema import DUTY, SIGNATURE

#: Output columns, in order (see docs/root-cause.md).
SCHEMA = pa.schema([
    ("kernel_id", pa.string()), ("kernel", pa.string()), ("status", pa.string()),
    ("mean_ns_before", pa.float64()), ("mean_ns_after", pa.float64()), ("change_pct", pa.float64()),
    ("launches_before", pa.float64()), ("launches_after", pa.float64()),
    ("gpu_s_before", pa.float64()), ("gpu_s_after", pa.float64()), ("delta_gpu_s", pa.float64()),
    ("share_before", pa.float64()), ("share_after", pa.float64()),
    ("configs_before", pa.int64()), ("configs_after", pa.int64()), ("configs_changed", pa.bool_()),
])

STATUSES = ("added", "removed", "slower", "faster", "same")

_DUTY = DUTY
_SIG = SIGNATURE


def trace_diff(con, job: str, before: dt.datetime, after: dt.datetime, hours: int = 24, *,
               threshold_pct: float = 5.0) -> pa.Table:
    """Compare ``job``'s kernels in ``[before, before + hours)`` with ``[after, after + hours)``.

    One row per kernel_id: status added | removed | slower | faster | same (per-launch mean moved by
    at least ``threshold_pct`` percent), mean ns per launch, launches and GPU seconds on each side
    (scaled by 1/sampling_duty), each side's share of the job's GPU time, and the number of launch
    configurations on each side. Rows are sorted by impact, the absolute change of GPU time.
    Naive datetimes are UTC. Raises ValueError for an unknown job, hours < 1 or overlapping windows.
    """
    if hours < 1:
        raise ValueError(f"hours must be >= 1, got {hours}")
    if before is None or after is None:
        raise ValueError("both --before and --after are required")
    before, after = _utc(before), _utc(after)
    span = dt.timedelta(hours=hours)
    if before < after + span and after < before + span:
        raise ValueError(f"the windows overlap: [{before.isoformat()}, +{hours}h) and [{after.isoformat()}, +{hours}h)")
    if not con.execute("SELECT count(*) FROM kernels WHERE job = ?", [job]).fetchone()[0]:
        known = [r[0] for r in con.execute("SELECT DISTINCT job FROM kernels ORDER BY 1 LIMIT 20").fetchall()]
        raise ValueError(f"job {job!r} has no kernel data in the warehouse; jobs: {', '.join(known) or 'none'}")
    rows = con.execute(
        f"""SELECT kernel_id, any_value(kernel) AS kernel, (window_start >= ? AND window_start < ?) AS is_after,
                   sum(launches / {_DUTY}), sum(total_ns / {_DUTY}), sum(total_ns) / nullif(sum(launches), 0),
                   list(DISTINCT {_SIG})
            FROM kernels
            WHERE job = ? AND ((window_start >= ? AND window_start < ?) OR (window_start >= ? AND window_start < ?))
            GROUP BY kernel_id, is_after""",
        [after, after + span, job, before, before + span, after, after + span]).fetchall()
    sides: dict[str, dict] = {}
    for kid, name, is_after, launches, total_ns, mean_ns, sigs in rows:
        entry = sides.setdefault(kid, {"kernel": name})
        entry["a" if is_after else "b"] = (float(launches or 0), float(total_ns or 0), mean_ns, set(sigs))
    totals = {s: sum(e[s][1] for e in sides.values() if s in e) for s in "ba"}
    out = [_row(kid, e, totals, threshold_pct) for kid, e in sides.items()]
    out.sort(key=lambda r: (-abs(r["delta_gpu_s"]), r["kernel_id"]))
    return pa.Table.from_pylist(out, schema=SCHEMA)


def _row(kid: str, e: dict, totals: dict, threshold_pct: float) -> dict:
    lb, tb, mb, sb = e.get("b", (0.0, 0.0, None, set()))
    la, ta, ma, sa = e.get("a", (0.0, 0.0, None, set()))
    change = 100.0 * (ma / mb - 1.0) if mb and ma is not None else None
    if lb <= 0:
        status = "added"
    elif la <= 0:
        status = "removed"
    elif change is not None and change >= threshold_pct:
        status = "slower"
    elif change is not None and change <= -threshold_pct:
        status = "faster"
    else:
        status = "same"
    return {
        "kernel_id": kid, "kernel": e["kernel"], "status": status,
        "mean_ns_before": float(mb) if mb is not None else None, "mean_ns_after": float(ma) if ma is not None else None,
        "change_pct": change, "launches_before": lb, "launches_after": la,
        "gpu_s_before": tb / 1e9, "gpu_s_after": ta / 1e9, "delta_gpu_s": (ta - tb) / 1e9,
        "share_before": tb / totals["b"] if totals["b"] else 0.0, "share_after": ta / totals["a"] if totals["a"] else 0.0,
        "configs_before": len(sb), "configs_after": len(sa), "configs_changed": bool(sb and sa and sb != sa),
    }


def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc)
