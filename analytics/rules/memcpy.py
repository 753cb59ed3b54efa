"""Copy rules: host copies moved from pinned to pageable memory; copy throughput fell.

Pageable host memory forces the driver to stage each copy through a pinned bounce buffer and makes
``cudaMemcpyAsync`` synchronous (CUDA C++ Programming Guide, "Page-Locked Host Memory"), so a switch
from pinned to pageable shows as a jump of the pageable share of host<->device bytes.
"""

from __future__ import annotations

from analytics.context import MemcpyStats, RegressionContext, Window
from analytics.results import Finding
from analytics.rules._common import beyond_noise, change, finding, strength

#: The pageable share of host<->device bytes must rise by this much (absolute) and reach it.
MIN_PAGEABLE_SHIFT = 0.20
#: Smallest fall of bytes/ns on the same copy path called a throughput drop (with the noise test).
MIN_THROUGHPUT_DROP = 0.04
MIN_HOURS = 3


def _host_bytes(window: Window) -> tuple[float, float, float]:
    """(pageable bytes, all host<->device bytes, host<->device copy ns) of a window."""
    pageable = total = ns = 0.0
    for m in window.memcpy:
        if m.host_kind is None:
            continue
        total += m.bytes
        ns += m.total_ns
        if m.host_kind == "pageable":
            pageable += m.bytes
    return pageable, total, ns


def pageable_memcpy(ctx: RegressionContext) -> Finding | None:
    """The pageable share of host<->device bytes rose by >= 20 points (and is >= 20 % after onset)."""
    pb, tb, nsb = _host_bytes(ctx.before)
    pa, ta, nsa = _host_bytes(ctx.after)
    if tb <= 0 or ta <= 0:
        return None
    share_b, share_a = pb / tb, pa / ta
    shift = share_a - share_b
    if share_a < MIN_PAGEABLE_SHIFT or shift < MIN_PAGEABLE_SHIFT:
        return None
    # copies do not change a kernel's time per launch nor a GPU's clock: lower for those series
    base = {"kernel": 0.6, "gpu": 0.5}.get(ctx.scope, 0.85)
    return finding("pageable_memcpy", base + 0.1 * strength(shift, MIN_PAGEABLE_SHIFT, 0.8), {
        "pageable_share_before": share_b, "pageable_share_after": share_a,
        "host_copy_bytes_per_ns_before": tb / nsb if nsb else None, "host_copy_bytes_per_ns_after": ta / nsa if nsa else None,
        "host_copy_s_per_hour_before": ctx.before.per_hour(nsb) / 1e9, "host_copy_s_per_hour_after": ctx.after.per_hour(nsa) / 1e9,
    }, "Host<->device copies moved from pinned to pageable memory: allocate host buffers pinned "
       "(e.g. DataLoader(pin_memory=True), torch.Tensor.pin_memory, cudaHostAlloc).")


def memcpy_throughput_drop(ctx: RegressionContext) -> Finding | None:
    """Bytes/ns of the same copy path (kind, source, destination) fell by >= 4 %, beyond 3 standard
    errors of the hourly medians."""
    before = {(m.copy_kind, m.src_kind, m.dst_kind): m for m in ctx.before.memcpy}
    best = None
    for m in ctx.after.memcpy:
        b: MemcpyStats | None = before.get((m.copy_kind, m.src_kind, m.dst_kind))
        if b is None or min(len(b.hourly_bytes_per_ns), len(m.hourly_bytes_per_ns)) < MIN_HOURS:
            continue
        rel = change(b.bytes_per_ns, m.bytes_per_ns)
        if rel is None or -rel < MIN_THROUGHPUT_DROP or not beyond_noise(b.hourly_bytes_per_ns, m.hourly_bytes_per_ns):
            continue
        added_s = (m.bytes / m.bytes_per_ns - m.bytes / b.bytes_per_ns) / 1e9 if m.bytes_per_ns > 0 else 0.0
        if best is None or added_s > best[0]:
            best = (added_s, rel, b, m)
    if best is None:
        return None
    added_s, rel, b, m = best
    return finding("memcpy_throughput_drop", 0.55 + 0.15 * strength(-rel, MIN_THROUGHPUT_DROP, 0.5), {
        "copy_kind": m.copy_kind, "src_kind": m.src_kind, "dst_kind": m.dst_kind,
        "gb_per_s_before": b.bytes_per_ns, "gb_per_s_after": m.bytes_per_ns, "change_pct": 100 * rel,
        "added_copy_s_per_hour": ctx.after.per_hour(added_s),
    }, "Copies on this path got slower: check PCIe link width/generation (nvidia-smi -q), NUMA placement "
       "of host buffers and other traffic on the link.")


#: Evidence in plain words per rule (see analytics.rules.kernels.EVIDENCE).
EVIDENCE = {
    "pageable_memcpy": (
        "Pageable host memory went from {{ ev.pageable_share_before | share }} to {{ ev.pageable_share_after | share }} of the "
        "host↔device copy bytes; host copies now run at {{ ev.host_copy_bytes_per_ns_after | v }} GB/s "
        "({{ ev.host_copy_bytes_per_ns_before | v }} GB/s before) and take {{ ev.host_copy_s_per_hour_after | v }} s per hour "
        "({{ ev.host_copy_s_per_hour_before | v }} s before)."),
    "memcpy_throughput_drop": (
        "{{ ev.copy_kind }} copies ({{ ev.src_kind }} → {{ ev.dst_kind }}) slowed from {{ ev.gb_per_s_before | v }} to "
        "{{ ev.gb_per_s_after | v }} GB/s ({{ ev.change_pct | signed }}), adding {{ ev.added_copy_s_per_hour | v }} s of copy "
        "time per hour."),
}
