"""A regression's context: what the job, its kernels, copies and GPUs did before and after onset.

Root-cause rules (analytics.rules) are pure functions over a ``RegressionContext``; this module is
the only place they get data from. ``load_context`` reads the warehouse (one DuckDB connection, the
views of analytics.warehouse) for two windows of ``hours`` hours: ``[onset - hours, onset)`` and
``[onset, onset + hours)``. Both windows hold plain numbers, so tests build contexts by hand.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field
from typing import Mapping

from analytics.results import Regression

#: NVML clock event reasons that mean "slowed down by power or heat" (pynvml names
#: ``nvmlClocksEventReason*``; values checked against nvidia-ml-py in the tests). Idle (0x1),
#: application clocks (0x2), sync boost (0x10) and display (0x100) are not throttling.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
THROTTLE_REASONS = {
    SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown",
    SW_THERMAL: "sw_thermal",
    HW_THERMAL: "hw_thermal",
    HW_POWER_BRAKE: "hw_power_brake",
}
THROTTLE_MASK = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE


def reason_names(bits: int) -> list[str]:
    """Names of the power/thermal reasons set in an NVML clock-event bit mask."""
    return [name for bit, name in THROTTLE_REASONS.items() if bits & bit]


@dataclass(frozen=True)
class KernelStats:
    """One kernel signature (kernel_id + launch configuration) of the job over one window.

    launches and total_ns are window totals (scaled by 1/sampling_duty); hourly_mean_ns holds the
    per-launch mean of each hour the signature ran, so rules can use the median (robust to one
    outlier hour).
    """

    kernel_id: str
    kernel: str
    signature: str
    launches: float
    total_ns: float
    hourly_mean_ns: tuple[float, ...] = ()
    hourly_launches: tuple[float, ...] = ()
    config: tuple = ()  # grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_mem
    hour_index: tuple[int, ...] = ()  # hour of each hourly value, counted from the window start  # grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_mem

    @property
    def mean_ns(self) -> float:
        if self.hourly_mean_ns:
            return statistics.median(self.hourly_mean_ns)
        return self.total_ns / self.launches if self.launches else 0.0


@dataclass(frozen=True)
class MemcpyStats:
    """One (copy_kind, src_kind, dst_kind) of the job over one window; totals, plus hourly bytes/ns."""

    copy_kind: str
    src_kind: str | None
    dst_kind: str | None
    count: float
    bytes: float
    total_ns: float
    hourly_bytes_per_ns: tuple[float, ...] = ()

    @property
    def host_kind(self) -> str | None:
        """The host side's memory kind (pageable, pinned, ...) of a host<->device copy."""
        if self.copy_kind == "HtoD":
            return self.src_kind
        if self.copy_kind == "DtoH":
            return self.dst_kind
        return None

    @property
    def bytes_per_ns(self) -> float:
        if self.hourly_bytes_per_ns:
            return statistics.median(self.hourly_bytes_per_ns)
        return self.bytes / self.total_ns if self.total_ns else 0.0


@dataclass(frozen=True)
class DeviceStats:
    """Device samples of one GPU over one window (means; None where the GPU lacks the counter).

    throttle_frac: share of samples whose clock-event reasons include a power/thermal bit;
    reasons: OR of those bits over the window.
    """

    gpu_uuid: str
    samples: int
    sm_clock_mhz: float | None = None
    sm_util_pct: float | None = None
    dram_bw_util_pct: float | None = None
    tensor_util_pct: float | None = None
    sm_occupancy_pct: float | None = None
    pcie_bytes_s: float | None = None  # mean of the busier direction
    power_w: float | None = None
    temp_c: float | None = None
    throttle_frac: float = 0.0
    reasons: int = 0
    gpu_model: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class Window:
    """Everything measured for the regression's job in one window.

    hours: hours in which the job ran (the denominator of per-hour rates).
    series: the regression's own series, one value per hour.
    gpu_kernels: (gpu_uuid, kernel_id) -> (launches, total_ns), for per-GPU comparisons.
    busy_s: the job's kernel time; wall_s: the process-GPU seconds its collectors observed.
    other_busy_s / other_jobs: kernel time and number of other jobs on the job's GPUs.
    """

    start: dt.datetime
    end: dt.datetime
    hours: int = 0
    series: tuple[float, ...] = ()
    kernels: tuple[KernelStats, ...] = ()
    memcpy: tuple[MemcpyStats, ...] = ()
    devices: Mapping[str, DeviceStats] = field(default_factory=dict)
    gpu_kernels: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    busy_s: float = 0.0
    wall_s: float = 0.0
    other_busy_s: float = 0.0
    other_jobs: int = 0
    records: int = 0
    dropped_records: int = 0

    def per_hour(self, value: float) -> float:
        return value / self.hours if self.hours else 0.0

    def signatures(self, kernel_id: str) -> dict[str, KernelStats]:
        return {k.signature: k for k in self.kernels if k.kernel_id == kernel_id}

    def by_kernel_id(self) -> dict[str, tuple[str, float, float]]:
        """kernel_id -> (name, launches, total_ns) summed over signatures."""
        out: dict[str, tuple[str, float, float]] = {}
        for k in self.kernels:
            name, launches, total = out.get(k.kernel_id, (k.kernel, 0.0, 0.0))
            out[k.kernel_id] = (name, launches + k.launches, total + k.total_ns)
        return out

    @property
    def kernel_ns(self) -> float:
        return sum(k.total_ns for k in self.kernels)


@dataclass(frozen=True)
class RegressionContext:
    """The regression and its job's two windows; ``before`` ends where ``after`` starts (onset)."""

    regression: Regression
    before: Window
    after: Window

    @property
    def scope(self) -> str:
        """kernel (a kernel series), gpu (a per-GPU series without kernel) or job."""
        r = self.regression
        if r.kernel_id:
            return "kernel"
        if r.gpu_uuid:
            return "gpu"
        return "job"


def load_context(con, regression: Regression, hours: int = 24) -> RegressionContext:
    """Load ``regression``'s context from the warehouse (read-only queries).

    The job's GPUs are those it ran kernels on in either window; for a per-GPU regression without
    a job the job is the one with the most kernel time on that GPU after onset.
    """
    if hours < 1:
        raise ValueError(f"hours must be >= 1, got {hours}")
    onset = _utc(regression.onset)
    span = dt.timedelta(hours=hours)
    job = regression.job or _busiest_job(con, regression.gpu_uuid, onset, onset + span)
    gpus = _job_gpus(con, job, onset - span, onset + span)
    if regression.gpu_uuid and regression.gpu_uuid not in gpus:
        gpus.append(regression.gpu_uuid)
    before = _load_window(con, regression, job, gpus, onset - span, onset)
    after = _load_window(con, regression, job, gpus, onset, onset + span)
    return RegressionContext(regression, before, after)


def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc)


# --- warehouse queries (all parameterised; timestamps are UTC) -------------------------------

_DUTY = "coalesce(nullif(sampling_duty, 0), 1)::DOUBLE"  # float32 arithmetic would lose digits
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


def _series(con, r: Regression, job: str, start: dt.datetime, end: dt.datetime) -> tuple[float, ...]:
    """The regression's own series, hourly, for the series names analytics.detect emits."""
    name = r.series
    if name.startswith("kernel_") and r.kernel_id:
        value = {"kernel_launches": "sum(launches)", "kernel_busy_s": "sum(total_ns) / 1e9"}.get(
            name, "sum(total_ns) / nullif(sum(launches), 0)")
        sig = " AND signature = ?" if r.signature and name == "kernel_mean_ns" else ""
        sql = (f"SELECT hour, {value} FROM kernel_hourly WHERE job = ? AND kernel_id = ?{sig} "
               f"AND hour >= ? AND hour < ? GROUP BY hour ORDER BY hour")
        params = [job, r.kernel_id] + ([r.signature] if sig else []) + [start, end]
    elif name.startswith("job_"):
        col = "launches" if "launches" in name else "gpu_busy_s"
        sql = f"SELECT hour, {col} FROM job_hourly WHERE job = ? AND hour >= ? AND hour < ? ORDER BY hour"
        params = [job, start, end]
    elif name.startswith("gpu_") and name[4:] in _DEVICE_SERIES and r.gpu_uuid:
        sql = f"SELECT hour, avg({name[4:]}) FROM device_hourly WHERE gpu_uuid = ? AND hour >= ? AND hour < ? GROUP BY hour ORDER BY hour"
        params = [r.gpu_uuid, start, end]
    else:
        return ()
    return tuple(float(v) for _, v in con.execute(sql, params).fetchall() if v is not None)


def _kernels(con, job: str, start: dt.datetime, end: dt.datetime) -> tuple[KernelStats, ...]:
    rows = con.execute(
        "SELECT kernel_id, any_value(kernel), signature, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
        "registers_per_thread, shared_mem_bytes,  sum(launches), sum(total_ns), list(mean_ns ORDER BY hour), list(launches ORDER BY hour), "
        "list(CAST(epoch(hour) - epoch(?::TIMESTAMPTZ) AS BIGINT) // 3600 ORDER BY hour) "
        "FROM kernel_hourly WHERE job = ? AND hour >= ? AND hour < ? GROUP BY ALL ORDER BY 1, 3",
        [start, job, start, end]).fetchall()
    return tuple(
        KernelStats(kernel_id=r[0], kernel=r[1], signature=r[2], launches=float(r[11] or 0), total_ns=float(r[12] or 0),
                    hourly_mean_ns=tuple(float(v) for v in r[13] if v is not None),
                    hourly_launches=tuple(float(v or 0) for v in r[14]), config=tuple(r[3:11]),
                    hour_index=tuple(int(v) for v in r[15]))
        for r in rows)


def _memcpy(con, job: str, start: dt.datetime, end: dt.datetime) -> tuple[MemcpyStats, ...]:
    rows = con.execute(
        "SELECT copy_kind, src_kind, dst_kind, sum(count), sum(bytes), sum(total_ns), list(bytes_per_ns ORDER BY hour) "
        "FROM memcpy_hourly WHERE job = ? AND hour >= ? AND hour < ? GROUP BY ALL ORDER BY 1, 2, 3",
        [job, start, end]).fetchall()
    return tuple(MemcpyStats(r[0], r[1], r[2], float(r[3] or 0), float(r[4] or 0), float(r[5] or 0),
                             tuple(float(v) for v in r[6] if v is not None)) for r in rows)


def _devices(con, gpus: list[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceStats]:
    if not gpus:
        return {}
    rows = con.execute(
        f"SELECT gpu_uuid, count(*), avg(sm_clock_mhz), avg(sm_util_pct), avg(dram_bw_util_pct), avg(tensor_util_pct), "
        f"avg(sm_occupancy_pct), avg(greatest(pcie_tx_bytes_s, pcie_rx_bytes_s)), avg(power_w), avg(temp_c), "
        f"avg(CASE WHEN coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK} <> 0 THEN 1.0 ELSE 0.0 END), "
        f"bit_or(coalesce(clocks_event_reasons, 0) & {THROTTLE_MASK}), any_value(gpu_model), any_value(host) "
        f"FROM device WHERE gpu_uuid IN (SELECT unnest(?::VARCHAR[])) AND ts >= ? AND ts < ? GROUP BY gpu_uuid",
        [gpus, start, end]).fetchall()
    return {r[0]: DeviceStats(r[0], int(r[1]), *(None if v is None else float(v) for v in r[2:10]),
                              throttle_frac=float(r[10] or 0), reasons=int(r[11] or 0), gpu_model=r[12], host=r[13])
            for r in rows}


def _load_window(con, r: Regression, job: str, gpus: list[str], start: dt.datetime, end: dt.datetime) -> Window:
    where = "job = ? AND window_start >= ? AND window_start < ?"
    gpu_kernels = {(g, k): (float(n or 0), float(t or 0)) for g, k, n, t in con.execute(
        f"SELECT gpu_uuid, kernel_id, sum(launches / {_DUTY}), sum(total_ns / {_DUTY}) FROM kernels WHERE {where} "
        f"AND gpu_uuid IS NOT NULL GROUP BY ALL", [job, start, end]).fetchall()}
    hours, busy_s = con.execute(
        f"SELECT count(DISTINCT date_trunc('hour', window_start)), coalesce(sum(total_ns / {_DUTY}), 0) / 1e9 "
        f"FROM kernels WHERE {where}", [job, start, end]).fetchone()
    wall_s = con.execute(
        f"SELECT coalesce(sum(window_s), 0) FROM (SELECT DISTINCT run_id, pid, gpu_uuid, window_start, window_s "
        f"FROM kernels WHERE {where})", [job, start, end]).fetchone()[0]
    other_busy_s, other_jobs = con.execute(
        f"SELECT coalesce(sum(total_ns / {_DUTY}), 0) / 1e9, count(DISTINCT job) FROM kernels "
        f"WHERE gpu_uuid IN (SELECT unnest(?::VARCHAR[])) AND job <> ? AND window_start >= ? AND window_start < ?",
        [gpus, job, start, end]).fetchone()
    records, dropped = con.execute(f"SELECT coalesce(sum(records), 0), coalesce(sum(dropped_records), 0) FROM health WHERE {where}",
                                   [job, start, end]).fetchone()
    return Window(start=start, end=end, hours=int(hours), series=_series(con, r, job, start, end),
                  kernels=_kernels(con, job, start, end), memcpy=_memcpy(con, job, start, end),
                  devices=_devices(con, gpus, start, end), gpu_kernels=gpu_kernels, busy_s=float(busy_s),
                  wall_s=float(wall_s), other_busy_s=float(other_busy_s), other_jobs=int(other_jobs),
                  records=int(records), dropped_records=int(dropped))
