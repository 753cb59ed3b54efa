"""``cudawatch doctor``: can this host collect? Driver, CUDA, CUPTI, NVML, GPM, counter permissions, detach drain, config.

Each check returns a ``Check`` (name, status ``ok``/``warn``/``fail``, detail) and never raises: a
missing piece is a finding, not a crash. Nothing here creates a CUDA context.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str


def check_driver() -> Check:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return Check("CUDA driver", "fail", f"libcuda.so.1 not loadable ({exc})")
    v = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return Check("CUDA driver", "warn", "libcuda loaded but cuDriverGetVersion failed")
    return Check("CUDA driver", "ok", f"CUDA {v.value // 1000}.{v.value % 1000 // 10} supported by the driver")


def check_nvml() -> list[Check]:
    try:
        import pynvml as nv
    except ImportError:
        return [Check("NVML", "fail", "nvidia-ml-py not installed (pip install cudawatch[collector])")]
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return [Check("NVML", "fail", f"nvmlInit failed: {exc}")]
    out = []
    try:
        drv = nv.nvmlSystemGetDriverVersion()
        n = nv.nvmlDeviceGetCount()
        out.append(Check("NVML", "ok" if n else "fail", f"driver {drv if isinstance(drv, str) else drv.decode()}, {n} GPU(s)"))
        for i in range(n):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            name = name if isinstance(name, str) else name.decode()
            try:
                gpm = bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
            except nv.NVMLError as exc:
                gpm = False
                name += f" (GPM query: {exc})"
            out.append(Check(f"GPM on GPU {i}", "ok" if gpm else "warn",
                             f"{name}: {'GPM metrics available' if gpm else 'no GPM (pre-Hopper or vGPU); NVML utilization only'}"))
    finally:
        nv.nvmlShutdown()
    return out


def check_cupti() -> Check:
    try:
        from collector.tracer import cupti_version
    except ImportError as exc:
        return Check("CUPTI", "fail", f"cupti-python not importable ({exc}); need cupti-python>=13.4")
    except OSError as exc:
        return Check("CUPTI", "fail", f"libcupti not loadable ({exc})")
    version = cupti_version()
    status = "ok"
    if "cupti-python 13.0" in version:
        status, version = "warn", version + " (13.0.x is ~15x slower per record; use >=13.4)"
    return Check("CUPTI", status, version)


def check_counter_permissions() -> Check:
    p = Path("/proc/driver/nvidia/params")
    try:
        text = p.read_text()
    except OSError:
        return Check("GPU counter permissions", "warn", f"{p} unreadable; cannot tell whether PM sampling needs root")
    for line in text.splitlines():
        if line.startswith("RmProfilingAdminOnly"):
            admin_only = line.split(":")[1].strip() == "1"
            if admin_only and os.geteuid() != 0:
                return Check("GPU counter permissions", "warn", "RmProfilingAdminOnly=1: PM sampling needs root or CAP_SYS_ADMIN (activity tracing and GPM do not)")
            return Check("GPU counter permissions", "ok", f"RmProfilingAdminOnly={'1 (running as root)' if admin_only else '0'}")
    return Check("GPU counter permissions", "warn", "RmProfilingAdminOnly not listed")


def check_detach_drain(lib=None) -> Check:
    """The detach drain's mode, and in ``fence`` mode (the default) whether the driver has every entry
    point the fence calls (``StreamFence.check``: looked up only, no call, no context). ``lib`` takes
    a stand-in for tests."""
    from collector.cuda_fence import FenceError, StreamFence
    from collector.drain import DetachDrain

    try:
        drain = DetachDrain()
    except ValueError as exc:
        return Check("detach drain", "fail", str(exc))
    if drain.max_s <= 0:
        return Check("detach drain", "ok", "off (CUDAWATCH_DETACH_DRAIN_MS=0): detaches force-flush at once")
    if drain.fence is None:
        return Check("detach drain", "ok", f"adaptive wait, at most {drain.max_s * 1e3:g} ms (the fence is off)")
    try:
        (drain.fence if lib is None else StreamFence(lib)).check()
    except FenceError as exc:
        return Check("detach drain", "warn", f"fence: {exc}; detaches fall back to the adaptive wait")
    return Check("detach drain", "ok", f"fence on every active context's legacy stream, at most {drain.max_s * 1e3:g} ms, "
                                       "adaptive wait as its floor")


def _setting(name: str, describe) -> Check:
    """``ok`` with what ``describe()`` says of the settings it reads, or ``fail`` with its ``ConfigError``."""
    from cudawatch.config import ConfigError

    try:
        return Check(name, "ok", describe())
    except ConfigError as exc:
        return Check(name, "fail", str(exc))


def check_config() -> list[Check]:
    from collector.budget import BufferBudget
    from collector.control import DutyController
    from cudawatch.config import FINALIZE_KEEPS_GPU_MIB, CollectorTiming, collector_adaptive, collector_off_mode, max_overhead_pct

    budget = _setting("overhead budget", lambda: f"CUDAWATCH_MAX_OVERHEAD_PCT={max_overhead_pct()} %")

    def controller() -> tuple[CollectorTiming, DutyController | None]:
        """The timing and, with a valid budget (else its own line fails), the session's controller."""
        t = CollectorTiming.from_env()
        ok = budget.status == "ok"
        return t, DutyController.for_timing(max_overhead_pct(), t) if ok else None

    def windows() -> str:
        t, ctl = controller()
        start = (f", at most {ctl.start_period_s():g} s until an on-phase traced something"
                 if ctl is not None and ctl.start_period_s() < ctl.steady_period_s() else "")
        return (f"{t.window_s} s windows, control period {t.min_period_s:g}-{t.max_period_s:g} s{start} "
                "(CUDAWATCH_WINDOW_S, CUDAWATCH_PERIOD_S)")

    def cycles() -> str:
        if not collector_adaptive():
            return "none: CUDAWATCH_ADAPTIVE=0 traces all the time (one attach; every launch pays for tracing)"
        off_mode = collector_off_mode()
        if off_mode != "detach":
            return f"none: CUDAWATCH_OFF_MODE={off_mode} stays attached between on-phases (the launch path pays while paused)"
        t, ctl = controller()
        period, start_s = ctl.steady_period_s(), ctl.start_period_s()
        per_day = 86400 / period
        more = "" if period >= t.max_period_s else " or more (slower cycles stretch it)"
        start = f" (every {start_s:g} s until an on-phase traced something)" if start_s < period else ""
        return (f"one detach/attach cycle every {period:g} s{more}{start}: at most {per_day:,.0f} a day, keeping "
                f"~{per_day * FINALIZE_KEEPS_GPU_MIB:,.0f} MiB of GPU memory a day ({FINALIZE_KEEPS_GPU_MIB} MiB each, CUPTI's; "
                "a longer CUDAWATCH_PERIOD_S makes fewer: docs/collector.md)")

    out = [budget,
           _setting("CUPTI host buffers",  # the session's default buffer budget
                    lambda: f"{BufferBudget.from_env().host_buffer >> 10} KiB each (CUDAWATCH_HOST_BUFFER_KIB)"),
           _setting("windows", windows)]
    if out[-1].status == "ok" and budget.status == "ok":  # a bad budget, period or window is reported once, above
        out.append(_setting("CUPTI cycles", cycles))
    root = Path(os.environ.get("CUDAWATCH_SHARDS") or "shards")
    probe = root if root.exists() else root.parent if str(root.parent) else Path(".")
    writable = os.access(probe if probe.exists() else ".", os.W_OK)
    out.append(Check("shard root", "ok" if writable else "fail", f"{root} ({'writable' if writable else 'not writable'})"))
    return out


def run_checks() -> list[Check]:
    checks = [check_driver()]
    checks += check_nvml()
    checks.append(check_cupti())
    checks.append(check_counter_permissions())
    checks.append(check_detach_drain())
    checks += check_config()
    return checks
