"""Regime rules: compute-, memory- or transfer-bound, from the device counters after onset.

The design article's analyzer calls a GPU compute-bound when SM utilisation is *below* 50 %, which
is backwards; here the thresholds follow Nsight Compute's speed-of-light guidance (a unit above
60 % of its peak is the one that bounds the kernel). NVML's SM utilisation is the share of time
*any* kernel ran, not SM throughput, so compute_bound also asks for a busy GPU (>= 90 %) with low
DRAM traffic. These findings describe the regime; they rank below the specific causes (confidence
<= 0.35) and are reported only when the regime was entered or deepened at onset (>= 10 points),
because a regime that did not change cannot explain a step (a counter that rose by less, e.g.
89.7 % -> 90.0 %, merely crossed the line by noise).
"""

from __future__ import annotations

from analytics.context import RegressionContext, Window
from analytics.results import Finding
from analytics.rules._common import finding, job_gpus, strength

SOL_PEAK = 60.0  # % of peak: Nsight Compute's "well utilised" line
BUSY_SM = 90.0  # % of time a kernel ran
MIN_DEEPEN = 10.0  # points
TRANSFER_SHARE = 0.20  # share of GPU time spent in host<->device copies
#: Nominal PCIe bandwidth per direction (bytes/s) by GPU model substring; unknown models skip the PCIe test.
PCIE_PEAK = {"H100": 64e9, "H200": 64e9, "B200": 64e9, "A100": 32e9, "A10": 32e9, "L4": 32e9, "L40": 32e9, "V100": 16e9, "T4": 16e9}


def _mean(window: Window, gpus, attr: str) -> float | None:
    vals = [getattr(window.devices[g], attr) for g in gpus if g in window.devices and getattr(window.devices[g], attr) is not None]
    return sum(vals) / len(vals) if vals else None


def _entered(before: float | None, after: float | None, line: float, deepen: float) -> bool:
    """After onset at or above ``line``, having risen by at least ``deepen`` (crossing by noise is not entering)."""
    if after is None or before is None or after < line:
        return False
    return after - before >= deepen


def compute_bound(ctx: RegressionContext) -> Finding | None:
    """GPUs busy >= 90 % of the time with DRAM bandwidth < 60 % of peak, entered at onset."""
    gpus = job_gpus(ctx)
    sm_b, sm_a = _mean(ctx.before, gpus, "sm_util_pct"), _mean(ctx.after, gpus, "sm_util_pct")
    dram_a = _mean(ctx.after, gpus, "dram_bw_util_pct")
    if dram_a is None or dram_a >= SOL_PEAK or not _entered(sm_b, sm_a, BUSY_SM, MIN_DEEPEN / 2):
        return None
    return finding("compute_bound", 0.2 + 0.1 * strength(sm_a, BUSY_SM, 100.0), {
        "sm_util_pct_before": sm_b, "sm_util_pct_after": sm_a, "dram_bw_util_pct_after": dram_a,
        "tensor_util_pct_after": _mean(ctx.after, gpus, "tensor_util_pct"),
    }, "The GPU is busy all the time with little memory traffic (compute-bound): reduce work per kernel "
       "(algorithm, lower precision, tensor cores) rather than memory traffic.")


def memory_bound(ctx: RegressionContext) -> Finding | None:
    """DRAM bandwidth >= 60 % of peak after onset, entered or up >= 10 points."""
    gpus = job_gpus(ctx)
    b, a = _mean(ctx.before, gpus, "dram_bw_util_pct"), _mean(ctx.after, gpus, "dram_bw_util_pct")
    if not _entered(b, a, SOL_PEAK, MIN_DEEPEN):
        return None
    return finding("memory_bound", 0.2 + 0.15 * strength(a, SOL_PEAK, 90.0), {
        "dram_bw_util_pct_before": b, "dram_bw_util_pct_after": a,
    }, "DRAM bandwidth is near its peak (memory-bound): improve access patterns and reuse "
       "(coalescing, shared memory tiling, fusion of elementwise kernels).")


def _transfer_share(window: Window) -> float:
    copy_ns = sum(m.total_ns for m in window.memcpy if m.host_kind is not None)
    total = copy_ns + window.kernel_ns
    return copy_ns / total if total else 0.0


def _pcie_share(window: Window, gpus) -> float | None:
    shares = []
    for g in gpus:
        d = window.devices.get(g)
        peak = next((v for name, v in PCIE_PEAK.items() if d and d.gpu_model and name in d.gpu_model), None)
        if d is not None and d.pcie_bytes_s is not None and peak:
            shares.append(100.0 * d.pcie_bytes_s / peak)
    return max(shares) if shares else None


def transfer_bound(ctx: RegressionContext) -> Finding | None:
    """Host<->device copies take >= 20 % of GPU time, or PCIe runs >= 60 % of nominal, entered at onset."""
    gpus = job_gpus(ctx)
    tb, ta = _transfer_share(ctx.before), _transfer_share(ctx.after)
    pb, pa = _pcie_share(ctx.before, gpus), _pcie_share(ctx.after, gpus)
    by_time = _entered(tb, ta, TRANSFER_SHARE, MIN_DEEPEN / 100)
    by_link = _entered(pb, pa, SOL_PEAK, MIN_DEEPEN)
    if not (by_time or by_link):
        return None
    return finding("transfer_bound", 0.2 + 0.1 * strength(max(ta, (pa or 0) / 100), TRANSFER_SHARE, 0.6), {
        "copy_share_before": tb, "copy_share_after": ta, "pcie_pct_of_peak_before": pb, "pcie_pct_of_peak_after": pa,
    }, "Host<->device transfers bound the job: keep data on the GPU, overlap copies with compute "
       "(pinned memory, async copies on side streams), or batch small copies.")


#: Evidence in plain words per rule (see analytics.rules.kernels.EVIDENCE).
EVIDENCE = {
    "compute_bound": (
        "SM utilisation was {{ ev.sm_util_pct_before | v }} % before and {{ ev.sm_util_pct_after | v }} % after the change"
        "{% if ev.dram_bw_util_pct_after is not none %}, memory bandwidth {{ ev.dram_bw_util_pct_after | v }} %{% endif %}"
        "{% if ev.tensor_util_pct_after is not none %}, tensor cores {{ ev.tensor_util_pct_after | v }} %{% endif %}: "
        "the kernels are compute-bound, so a slower clock or kernel shows directly in job time."),
    "memory_bound": (
        "DRAM bandwidth utilisation went from {{ ev.dram_bw_util_pct_before | v }} % to {{ ev.dram_bw_util_pct_after | v }} %: "
        "the kernels are memory-bound."),
    "transfer_bound": (
        "Host↔device copies took {{ ev.copy_share_after | share }} of the job's GPU time after the change "
        "({{ ev.copy_share_before | share }} before){% if ev.pcie_pct_of_peak_after is not none %}; PCIe ran at "
        "{{ ev.pcie_pct_of_peak_after | v }} % of its peak{% endif %}."),
}
