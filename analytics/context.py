"""A regression's context as plain data: what the job, its kernels, copies and GPUs did before and
after onset (no I/O here).

Root-cause rules (analytics.rules) are pure functions over a ``RegressionContext``;
``analytics.store.context.load_context`` fills one from the warehouse, and tests build them by hand.
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
    gpu_wall_s / gpu_other_busy_s: per GPU uuid, the job's observed process-GPU seconds and the
    other jobs' kernel seconds on it (which GPU a contention is on).
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
    gpu_wall_s: Mapping[str, float] = field(default_factory=dict)
    gpu_other_busy_s: Mapping[str, float] = field(default_factory=dict)
    #: Per UTC hour: the job's kernel seconds, observed process-GPU seconds and launches, so rules can
    #: compare an hour with the same hour a day earlier (inference load follows the time of day).
    hourly_busy_s: Mapping[dt.datetime, float] = field(default_factory=dict)
    hourly_wall_s: Mapping[dt.datetime, float] = field(default_factory=dict)
    hourly_launches: Mapping[dt.datetime, float] = field(default_factory=dict)

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
