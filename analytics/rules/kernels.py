"""Kernel rules: slower per launch, launch configuration changed, kernel mix changed, more launches.

The kernel-mix rules follow Holistic Trace Analysis' trace diff (kernels added, removed, changed in
launches or duration between two windows); a kernel series (the regression has a kernel_id) is only
explained by its own kernel, a job series by whichever kernel accounts for the most GPU time.
"""

from __future__ import annotations

from analytics.context import KernelStats, RegressionContext
from analytics.results import Finding
from analytics.rules._common import (beyond_noise, change, finding, gpu_s_per_hour, in_scope, job_delta_gpu_s, robust_sd,
                                     strength)

#: Smallest per-launch slowdown called a change: above the simulator's and real fleets' day-scale drift
#: of a kernel's hourly mean (1-2 %), so slow drift is not blamed on the kernel.
MIN_SLOWER = 0.03
#: ... and at least this many robust standard deviations of the kernel's hourly means before onset.
MIN_SLOWER_SIGMAS = 2.0
#: A job-level regression is blamed on one kernel only when that kernel explains this share of it.
MIN_EXPLAINED = 0.25
#: Smallest rise of a kernel's share of the job's launches called "more launches" (shares are stable:
#: a training step launches the same kernels every time, so the 3-standard-error test does the rest).
MIN_MORE_LAUNCHES = 0.03
#: A signature "disappeared" when its launch rate fell below this fraction of what it was (and vice versa).
GONE_FRACTION = 0.10
#: Hours a signature or kernel must have run on a side of onset to count as present there.
MIN_HOURS = 3
#: Share of the job's GPU time a new or vanished kernel must have to be reported.
MIN_MIX_SHARE = 0.01

_CONFIG_FIELDS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes")


def _explained(ctx: RegressionContext, delta_gpu_s: float) -> float:
    """Fraction of the job's GPU-time growth per hour that one kernel's change accounts for (0..1)."""
    total = job_delta_gpu_s(ctx)
    return min(1.0, max(0.0, delta_gpu_s / total)) if total > 0 else 0.0


def _scale(ctx: RegressionContext, kernel_conf: float, floor: float, delta_gpu_s: float) -> float:
    """Kernel series keep ``kernel_conf``; job series scale from ``floor`` by the share explained."""
    if ctx.scope == "kernel":
        return kernel_conf
    return floor + (kernel_conf - floor) * _explained(ctx, delta_gpu_s)


def kernel_slower(ctx: RegressionContext) -> Finding | None:
    """Same signature (kernel + launch configuration), slower per launch: the median hourly mean rose
    by >= 3 %, >= 2 hourly standard deviations and > 3 standard errors of the medians."""
    if ctx.scope == "gpu":
        return None  # a GPU counter series: kernels slow down because of the GPU, not the reverse
    before = {(k.kernel_id, k.signature): k for k in ctx.before.kernels if in_scope(ctx, k.kernel_id)}
    best = None
    for k in ctx.after.kernels:
        b = before.get((k.kernel_id, k.signature))
        if b is None or (ctx.regression.signature and ctx.scope == "kernel" and k.signature != ctx.regression.signature):
            continue
        if min(len(b.hourly_mean_ns), len(k.hourly_mean_ns)) < MIN_HOURS:
            continue
        rel = change(b.mean_ns, k.mean_ns)
        if rel is None or rel < MIN_SLOWER or not beyond_noise(b.hourly_mean_ns, k.hourly_mean_ns):
            continue
        if k.mean_ns - b.mean_ns < MIN_SLOWER_SIGMAS * robust_sd(b.hourly_mean_ns):
            continue
        impact = (k.mean_ns - b.mean_ns) * ctx.after.per_hour(k.launches) / 1e9
        if ctx.scope == "job" and _explained(ctx, impact) < MIN_EXPLAINED:
            continue
        if best is None or impact > best[0]:
            best = (impact, rel, b, k)
    if best is None:
        return None
    impact, rel, b, k = best
    conf = _scale(ctx, 0.5 + 0.15 * strength(rel, MIN_SLOWER, 0.2), 0.3, impact)
    return finding("kernel_slower", conf, {
        "kernel": k.kernel, "kernel_id": k.kernel_id, "signature": k.signature,
        "mean_ns_before": b.mean_ns, "mean_ns_after": k.mean_ns, "change_pct": 100 * rel,
        "launches_per_hour_before": ctx.before.per_hour(b.launches), "launches_per_hour_after": ctx.after.per_hour(k.launches),
        "added_gpu_s_per_hour": impact,
    }, "Same launch configuration, slower per launch: look for a code, library, driver or input-size change "
       "at onset and profile this kernel with Nsight Compute.")


def _rate(ctx_window, k: KernelStats) -> float:
    return ctx_window.per_hour(k.launches)


def launch_config_changed(ctx: RegressionContext) -> Finding | None:
    """A kernel_id's old launch signature disappeared and a new one appeared at onset (grid, block,
    registers or shared memory changed)."""
    best = None
    ids = {k.kernel_id for k in ctx.before.kernels + ctx.after.kernels if in_scope(ctx, k.kernel_id)}
    for kid in ids:
        old_sigs, new_sigs = ctx.before.signatures(kid), ctx.after.signatures(kid)
        gone = [b for s, b in old_sigs.items() if len(b.hourly_mean_ns) >= MIN_HOURS
                and (s not in new_sigs or _rate(ctx.after, new_sigs[s]) <= GONE_FRACTION * _rate(ctx.before, b))]
        came = [a for s, a in new_sigs.items() if len(a.hourly_mean_ns) >= min(MIN_HOURS, ctx.after.hours)
                and (s not in old_sigs or _rate(ctx.before, old_sigs[s]) <= GONE_FRACTION * _rate(ctx.after, a))]
        if not gone or not came or ctx.after.hours < 1:
            continue
        old = max(gone, key=lambda k: k.total_ns)
        new = max(came, key=lambda k: k.total_ns)
        delta = gpu_s_per_hour(ctx.after, sum(k.total_ns for k in came)) - gpu_s_per_hour(ctx.before, sum(k.total_ns for k in gone))
        if best is None or delta > best[0]:
            best = (delta, old, new)
    if best is None:
        return None
    delta, old, new = best
    changed = {f: [a, b] for f, a, b in zip(_CONFIG_FIELDS, old.config, new.config) if a != b}
    conf = _scale(ctx, 0.85, 0.5, delta)
    return finding("launch_config_changed", conf, {
        "kernel": new.kernel, "kernel_id": new.kernel_id, "signature_before": old.signature, "signature_after": new.signature,
        "changed": changed, "mean_ns_before": old.mean_ns, "mean_ns_after": new.mean_ns,
        "change_pct": 100 * (change(old.mean_ns, new.mean_ns) or 0.0), "added_gpu_s_per_hour": delta,
    }, "The kernel now launches with a different configuration (grid/block/registers/shared memory): check "
       "compiler flags, autotuner or library version changes and compare occupancy in Nsight Compute.")


def _mix(ctx: RegressionContext, present, absent, window_present, window_absent):
    """Kernels (by kernel_id) that ran >= MIN_HOURS hours with >= 1 % of GPU time on one side and not at all on the other
    (the share test is waived for a kernel series' own kernel)."""
    if window_absent.hours < MIN_HOURS or window_present.hours < 1:
        return []
    total = window_present.kernel_ns or 1.0
    hours: dict[str, int] = {}
    for k in window_present.kernels:
        hours[k.kernel_id] = max(hours.get(k.kernel_id, 0), len(k.hourly_mean_ns))
    need = min(MIN_HOURS, window_present.hours)
    # the regression's own kernel counts whatever its share: the detector already judged it worth a look
    own = ctx.regression.kernel_id if ctx.scope == "kernel" else None
    return [(kid, name, launches, ns) for kid, (name, launches, ns) in present.items()
            if kid not in absent and (ns / total >= MIN_MIX_SHARE or kid == own) and hours.get(kid, 0) >= need]


def _listed(found, side, share_key: str, top: int = 5) -> list[dict]:
    """Evidence rows for the kernels that appeared or vanished, on the side where they ran."""
    return [{"kernel": n, "kernel_id": kid, "launches_per_hour": side.per_hour(la), share_key: ns / (side.kernel_ns or 1.0)}
            for kid, n, la, ns in found[:top]]


def new_kernel(ctx: RegressionContext) -> Finding | None:
    """Kernels that never ran before onset now take >= 1 % of the job's GPU time."""
    before, after = ctx.before.by_kernel_id(), ctx.after.by_kernel_id()
    found = [m for m in _mix(ctx, after, before, ctx.after, ctx.before) if in_scope(ctx, m[0])]
    if not found:
        return None
    added = gpu_s_per_hour(ctx.after, sum(m[3] for m in found))
    found.sort(key=lambda m: -m[3])
    conf = _scale(ctx, 0.85, 0.5, added)
    return finding("new_kernel", conf, {
        "kernels": _listed(found, ctx.after, "share_after"), "count": len(found), "added_gpu_s_per_hour": added,
    }, "New kernels appeared at onset (a code or library change): diff the job's kernels with `cudawatch diff` "
       "and check the deployment or library upgrade of that hour.")


def kernel_vanished(ctx: RegressionContext) -> Finding | None:
    """Kernels that took >= 1 % of the job's GPU time before onset stopped running."""
    before, after = ctx.before.by_kernel_id(), ctx.after.by_kernel_id()
    found = [m for m in _mix(ctx, before, after, ctx.before, ctx.after) if in_scope(ctx, m[0])]
    if not found:
        return None
    found.sort(key=lambda m: -m[3])
    share = sum(m[3] for m in found) / (ctx.before.kernel_ns or 1.0)
    conf = 0.85 if ctx.scope == "kernel" else 0.5 + 0.3 * strength(share, MIN_MIX_SHARE, 0.1)
    return finding("kernel_vanished", conf, {
        "kernels": _listed(found, ctx.before, "share_before"), "count": len(found), "share_before": share,
    }, "Kernels stopped running at onset (a code path or library change, e.g. a fused kernel replaced): "
       "check with `cudawatch diff` what replaced them.")


def more_launches(ctx: RegressionContext) -> Finding | None:
    """A kernel present on both sides takes a >= 3 % larger share of the job's launches, beyond the
    hourly noise of that share. Shares, not launches per hour: an inference job's launches follow its
    daily load, and more requests are not a regression; more launches of one kernel per unit of work are."""
    if ctx.scope == "gpu":
        return None
    before, after = ctx.before.by_kernel_id(), ctx.after.by_kernel_id()
    total_b = sum(k.launches for k in ctx.before.kernels)
    total_a = sum(k.launches for k in ctx.after.kernels)
    if total_b <= 0 or total_a <= 0:
        return None
    share_b, share_a = _hourly_shares(ctx.before.kernels), _hourly_shares(ctx.after.kernels)
    best = None
    for kid, (name, la, ns) in after.items():
        if kid not in before or not in_scope(ctx, kid):
            continue
        _, lb, nsb = before[kid]
        rel = change(lb / total_b, la / total_a)
        if rel is None or rel < MIN_MORE_LAUNCHES or not beyond_noise(share_b.get(kid, ()), share_a.get(kid, ())):
            continue
        rb, ra = ctx.before.per_hour(lb), ctx.after.per_hour(la)
        # added GPU time: the extra launches per unit of the job's work, at the old cost per launch
        impact = ctx.after.per_hour(la - lb / total_b * total_a) * (nsb / lb if lb else 0.0) / 1e9
        if ctx.scope == "job" and _explained(ctx, impact) < MIN_EXPLAINED:
            continue
        if best is None or impact > best[0]:
            best = (impact, rel, kid, name, rb, ra, lb / total_b, la / total_a)
    if best is None:
        return None
    impact, rel, kid, name, rb, ra, sb, sa = best
    # more launches explain more GPU time or launches, not a slower launch (kernel_mean_ns)
    kernel_conf = 0.4 if ctx.regression.series == "kernel_mean_ns" else 0.8
    conf = _scale(ctx, kernel_conf, 0.4, impact)
    return finding("more_launches", conf, {
        "kernel": name, "kernel_id": kid, "launches_per_hour_before": rb, "launches_per_hour_after": ra,
        "share_of_job_launches_before": sb, "share_of_job_launches_after": sa,
        "change_pct": 100 * rel, "added_gpu_s_per_hour": impact,
    }, "The kernel is launched more often per unit of work: check for smaller batches, extra iterations or a "
       "loop that is no longer fused; CUDA Graphs or fusion cut launch counts.")


def _hourly_shares(kernels) -> dict[str, tuple[float, ...]]:
    """Per kernel_id, its share of the job's launches in each hour."""
    per_kernel = _hourly_launches(kernels)
    total: dict[int, float] = {}
    for per_hour in per_kernel.values():
        for h, v in per_hour.items():
            total[h] = total.get(h, 0.0) + v
    return {kid: tuple(v / total[h] for h, v in per_hour.items() if total.get(h)) for kid, per_hour in per_kernel.items()}


def _hourly_launches(kernels) -> dict[str, dict[int, float]]:
    """Launches per hour by kernel_id (hour index -> launches), signatures of one kernel summed hour by hour."""
    out: dict[str, dict[int, float]] = {}
    for k in kernels:
        hours = k.hour_index or range(len(k.hourly_launches))
        per_hour = out.setdefault(k.kernel_id, {})
        for h, v in zip(hours, k.hourly_launches):
            per_hour[h] = per_hour.get(h, 0.0) + v
    return out


#: Evidence in plain words, one Jinja template per rule (rendered by reports.evidence with ``ev``,
#: the finding's evidence; ``size``, the regression's one size; ``same``, whether the event measures
#: this kernel's own per-launch time; ``series``, the regression's series; filters ``v`` (value), ``us`` (ns as µs), ``share``
#: (0..1 as %), ``signed`` (a change in %), ``name`` (a kernel name shortened)).
EVIDENCE = {
    "kernel_slower": (
        "{% if same %}Per-launch time of this kernel rose {{ size.change }} ({{ size.values }})"
        "{% else %}Per-launch time of {{ ev.kernel | name }} changed {{ ev.change_pct | signed }} "
        "({{ ev.mean_ns_before | us }} → {{ ev.mean_ns_after | us }} µs, the hours before vs after the change){% endif %}"
        "{% if ev.signature %} in launch configuration {{ ev.signature }}{% endif %}. "
        "At {{ ev.launches_per_hour_after | v }} launches per hour that adds {{ ev.added_gpu_s_per_hour | v }} GPU-seconds per hour."),
    "launch_config_changed": (
        "The launch configuration of {{ ev.kernel | name }} changed from {{ ev.signature_before }} to {{ ev.signature_after }}"
        "{% if ev.changed %} ({{ ev.changed | join(', ') }}){% endif %}. "
        "{% if same %}Per-launch time of this kernel rose {{ size.change }} ({{ size.values }}){% else %}Per-launch time in the new "
        "configuration: {{ ev.change_pct | signed }} ({{ ev.mean_ns_before | us }} → {{ ev.mean_ns_after | us }} µs){% endif %}, "
        "adding {{ ev.added_gpu_s_per_hour | v }} GPU-seconds per hour."),
    "new_kernel": (
        "{{ ev.count }} kernel{{ 's' if ev.count != 1 }} that did not run before started at the change"
        "{% if ev.kernels %}: {{ ev.kernels[0].kernel | name }} ({{ ev.kernels[0].launches_per_hour | v }} launches per hour, "
        "{{ ev.kernels[0].share_after | share }} of the job's kernel time in the hours after the change)"
        "{% if ev.count > 1 %} and {{ ev.count - 1 }} more{% endif %}{% endif %}. "
        "Together they add {{ ev.added_gpu_s_per_hour | v }} GPU-seconds per hour."),
    "kernel_vanished": (
        "{{ ev.count }} kernel{{ 's' if ev.count != 1 }} that took {{ ev.share_before | share }} of the job's kernel time before "
        "the change stopped running{% if ev.kernels %}: {{ ev.kernels[0].kernel | name }}{% if ev.count > 1 %} and "
        "{{ ev.count - 1 }} more{% endif %}{% endif %}."),
    "more_launches": (
        "Launches per hour of {{ ev.kernel | name }} went from {{ ev.launches_per_hour_before | v }} to "
        "{{ ev.launches_per_hour_after | v }} ({{ ev.change_pct | signed }}); "
        "{% if series == 'kernel_launch_share' %}its share of the job's launches rose {{ size.change }} ({{ size.values }})"
        "{% else %}its share of the job's launches went from {{ ev.share_of_job_launches_before | share }} to "
        "{{ ev.share_of_job_launches_after | share }}{% endif %}, adding {{ ev.added_gpu_s_per_hour | v }} GPU-seconds per hour."),
}
