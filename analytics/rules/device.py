"""GPU rules: clock throttling, a straggler GPU, idle gaps (host- or input-bound), contention.

Throttle reasons are NVML clock event reasons (``nvmlDeviceGetCurrentClocksEventReasons``); idle
time follows Holistic Trace Analysis' idle-time analysis (GPU busy time against wall time); the
straggler test compares each GPU of a job with the median of its peers, as HTA's straggler
identification does per rank.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics

from analytics.context import RegressionContext, reason_names
from analytics.results import Finding
from analytics.rules._common import change, finding, job_gpus, strength

#: The SM clock must fall by at least this much ...
MIN_CLOCK_DROP = 0.03
#: ... while the share of samples with a power/thermal reason rises by at least this much.
MIN_THROTTLE_RISE = 0.20
#: A GPU is a straggler when its kernels run >= 8 % slower than the median of its peers (and were not before).
MIN_STRAGGLER = 0.08
#: Before onset the same GPU must have been within this much of its peers.
MAX_STRAGGLER_BEFORE = 0.04
#: Busy share of wall time must fall by >= 4 % relative and >= 2 points absolute ...
MIN_IDLE_DROP = 0.04
MIN_IDLE_POINTS = 0.02
#: ... and launches per wall second by >= 3 % (the same launch rate with shorter kernels is a faster GPU).
MIN_LAUNCH_RATE_DROP = 0.03
#: Other jobs' kernel time on the job's GPUs, as a share of the job's wall time, must rise by >= 5 points.
MIN_CONTENTION = 0.05
MIN_LAUNCHES = 10


def clock_throttle(ctx: RegressionContext) -> Finding | None:
    """SM clock fell >= 3 % on a GPU of the regression while power/thermal reasons became common."""
    best = None
    for g in job_gpus(ctx):
        b, a = ctx.before.devices.get(g), ctx.after.devices.get(g)
        if b is None or a is None or not b.sm_clock_mhz or a.sm_clock_mhz is None:
            continue
        drop = 1 - a.sm_clock_mhz / b.sm_clock_mhz
        rise = a.throttle_frac - b.throttle_frac
        if drop < MIN_CLOCK_DROP or rise < MIN_THROTTLE_RISE:
            continue
        if best is None or drop > best[0]:
            best = (drop, g, b, a)
    if best is None:
        return None
    drop, g, b, a = best
    base = 0.9 if ctx.scope == "gpu" else 0.8
    return finding("clock_throttle", base + 0.1 * strength(drop, MIN_CLOCK_DROP, 0.3), {
        "gpu_uuid": g, "host": a.host, "sm_clock_mhz_before": b.sm_clock_mhz, "sm_clock_mhz_after": a.sm_clock_mhz,
        "clock_change_pct": -100 * drop, "throttled_share_before": b.throttle_frac, "throttled_share_after": a.throttle_frac,
        "reasons": reason_names(a.reasons), "power_w_before": b.power_w, "power_w_after": a.power_w,
        "temp_c_before": b.temp_c, "temp_c_after": a.temp_c,
    }, "The GPU's SM clock is held down by power or thermal limits: check cooling, fans, power cap "
       "(nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE) and drain the node if hardware slowdown persists.")


def _gpu_index(gpu_kernels, kernel_ids) -> dict[str, float]:
    """Per GPU: GPU-time-weighted geometric mean of (its mean per launch / median of its peers') over kernels."""
    per_kernel: dict[str, dict[str, tuple[float, float]]] = {}
    for (g, k), (launches, ns) in gpu_kernels.items():
        if (kernel_ids is None or k in kernel_ids) and launches >= MIN_LAUNCHES and ns > 0:
            per_kernel.setdefault(k, {})[g] = (ns / launches, ns)
    logs: dict[str, list[tuple[float, float]]] = {}
    for k, gpus in per_kernel.items():
        if len(gpus) < 2:
            continue
        for g, (mean, ns) in gpus.items():
            peers = statistics.median(m for h, (m, _) in gpus.items() if h != g)
            logs.setdefault(g, []).append((math.log(mean / peers), ns))
    return {g: math.exp(sum(l * w for l, w in v) / sum(w for _, w in v)) for g, v in logs.items()}


def straggler_gpu(ctx: RegressionContext) -> Finding | None:
    """One GPU of the job runs the same kernels >= 8 % slower than its peers' median, and did not before."""
    kernel_ids = {ctx.regression.kernel_id} if ctx.scope == "kernel" else None
    before, after = _gpu_index(ctx.before.gpu_kernels, kernel_ids), _gpu_index(ctx.after.gpu_kernels, kernel_ids)
    candidates = [ctx.regression.gpu_uuid] if ctx.scope == "gpu" else list(after)
    best = None
    for g in candidates:
        if g not in after or after[g] - 1 < MIN_STRAGGLER:
            continue
        if g in before and before[g] - 1 > MAX_STRAGGLER_BEFORE:
            continue  # it was already slow: not what changed at onset
        if best is None or after[g] > best[1]:
            best = (g, after[g])
    if best is None:
        return None
    g, idx = best
    return finding("straggler_gpu", 0.6 + 0.15 * strength(idx - 1, MIN_STRAGGLER, 0.3), {
        "gpu_uuid": g, "slower_than_peers_pct_before": 100 * (before.get(g, 1.0) - 1), "slower_than_peers_pct_after": 100 * (idx - 1),
        "peers": len(after) - 1,
    }, "One GPU runs the same kernels slower than its peers and holds back the whole job: check its clocks, "
       "errors (nvidia-smi -q -d ECC,PERFORMANCE) and PCIe/NVLink health; exclude it if it stays slow.")


def _day_matched(b, a) -> tuple[tuple[float, float, float], tuple[float, float, float], int] | None:
    """(busy, wall, launches) summed over after-hours and over the same hours one day earlier, when
    >= 3 such pairs exist: inference load follows the time of day, so a night hour is compared with
    a night hour."""
    day = dt.timedelta(hours=24)
    pairs = [(h - day, h) for h in a.hourly_wall_s if (h - day) in b.hourly_wall_s]
    if len(pairs) < 3:
        return None
    sb = tuple(sum(m[hb] for hb, _ in pairs) for m in (b.hourly_busy_s, b.hourly_wall_s, b.hourly_launches))
    sa = tuple(sum(m[ha] for _, ha in pairs) for m in (a.hourly_busy_s, a.hourly_wall_s, a.hourly_launches))
    return sb, sa, len(pairs)


def gpu_idle_gaps(ctx: RegressionContext) -> Finding | None:
    """The job's GPU busy share of wall time fell while wall time did not and launches per second fell:
    the GPU waits for the host (input pipeline, Python overhead, synchronisation). Hours after onset
    are compared with the same hours a day earlier when the before-window has them."""
    b, a = ctx.before, ctx.after
    if b.wall_s <= 0 or a.wall_s <= 0 or b.hours < 3 or a.hours < 1:
        return None
    matched = _day_matched(b, a)
    if matched is not None:
        (busy_b, wall_b, n_b), (busy_a, wall_a, n_a), pairs = matched
    else:
        busy_b, wall_b, n_b = b.busy_s, b.wall_s, sum(k.launches for k in b.kernels)
        busy_a, wall_a, n_a = a.busy_s, a.wall_s, sum(k.launches for k in a.kernels)
        pairs = 0
    if wall_b <= 0 or wall_a <= 0:
        return None
    share_b, share_a = busy_b / wall_b, busy_a / wall_a
    hours_b, hours_a = (pairs, pairs) if pairs else (b.hours, a.hours)
    wall_rel = change(wall_b / hours_b, wall_a / hours_a)
    launches_b, launches_a = n_b / wall_b, n_a / wall_a
    drop = 1 - share_a / share_b if share_b > 0 else 0.0
    if drop < MIN_IDLE_DROP or share_b - share_a < MIN_IDLE_POINTS or (wall_rel is not None and wall_rel < -0.1):
        return None
    if launches_b <= 0 or launches_a / launches_b > 1 - MIN_LAUNCH_RATE_DROP:
        return None  # same launch rate, shorter kernels: the GPU got faster, not idle
    return finding("gpu_idle_gaps", 0.55 + 0.2 * strength(drop, MIN_IDLE_DROP, 0.4), {
        "busy_share_before": share_b, "busy_share_after": share_a,
        "wall_s_per_hour_before": wall_b / hours_b, "wall_s_per_hour_after": wall_a / hours_a,
        "launches_per_s_before": launches_b, "launches_per_s_after": launches_a, "same_hour_pairs": pairs,
    }, "The GPU sits idle between kernels more than before (host- or input-bound): profile the host side "
       "(data loading, Python overhead, synchronisation); more DataLoader workers, prefetching or CUDA Graphs help.")


def contention(ctx: RegressionContext) -> Finding | None:
    """Other jobs' kernels on the job's GPUs rose by >= 5 % of the job's wall time. The evidence
    names the GPU (``gpu_uuid``) when the rise is on one GPU: the GPU whose other-job share of its
    wall time rose most, when that rise is >= 5 points and holds most of the job's rise in other
    jobs' kernel seconds (analytics.incidents groups one GPU's contention into one incident)."""
    b, a = ctx.before, ctx.after
    if a.wall_s <= 0:
        return None
    share_b = b.other_busy_s / b.wall_s if b.wall_s > 0 else 0.0
    share_a = a.other_busy_s / a.wall_s
    if share_a - share_b < MIN_CONTENTION:
        return None
    evidence = {"other_jobs_before": b.other_jobs, "other_jobs_after": a.other_jobs,
                "other_busy_share_before": share_b, "other_busy_share_after": share_a}
    gpu = _contended_gpu(b, a)
    if gpu is not None:
        evidence.update(gpu)
    return finding("contention", 0.75 + 0.15 * strength(share_a - share_b, MIN_CONTENTION, 0.3), evidence,
                   "Other jobs now share this job's GPUs: give the job exclusive GPUs (exclusive-process compute mode, "
                   "scheduler constraints) or partition them with MIG.")


def _contended_gpu(b, a) -> dict | None:
    """The one GPU the other jobs' kernel time rose on, with its shares; None when the rise is
    spread over several GPUs (no GPU holds more than half of it) or per-GPU data is missing."""
    def share(w, g):
        wall = w.gpu_wall_s.get(g, 0.0)
        return w.gpu_other_busy_s.get(g, 0.0) / wall if wall > 0 else 0.0

    rises = {g: share(a, g) - share(b, g) for g in a.gpu_wall_s if a.gpu_wall_s[g] > 0}
    if not rises:
        return None
    g = max(rises, key=lambda k: (rises[k], k))
    per_h = {k: a.per_hour(a.gpu_other_busy_s.get(k, 0.0)) - b.per_hour(b.gpu_other_busy_s.get(k, 0.0)) for k in rises}
    total = sum(max(0.0, v) for v in per_h.values())
    if rises[g] < MIN_CONTENTION or total <= 0 or per_h[g] <= 0.5 * total:
        return None
    return {"gpu_uuid": g, "gpu_other_busy_share_before": share(b, g), "gpu_other_busy_share_after": share(a, g)}


#: Evidence in plain words per rule (see analytics.rules.kernels.EVIDENCE; ``gpu`` names a GPU host:index).
EVIDENCE = {
    "clock_throttle": (
        "The SM clock of GPU {{ gpu(ev.gpu_uuid) }} "
        "{% if series == 'gpu_sm_clock_mhz' and ev.gpu_uuid == r.gpu_uuid %}fell {{ size.change }} ({{ size.values }}) "
        "{% else %}fell from {{ ev.sm_clock_mhz_before | v }} to {{ ev.sm_clock_mhz_after | v }} MHz {% endif %}"
        "while {{ ev.reasons | join(', ') if ev.reasons else 'clock' }} throttling was active {{ ev.throttled_share_after | share }} "
        "of the hours after the change ({{ ev.throttled_share_before | share }} before). Power {{ ev.power_w_before | v }} → "
        "{{ ev.power_w_after | v }} W, temperature {{ ev.temp_c_before | v }} → {{ ev.temp_c_after | v }} °C."),
    "straggler_gpu": (
        "GPU {{ gpu(ev.gpu_uuid) }} runs the job's kernels {{ ev.slower_than_peers_pct_after | v }} % slower than its "
        "{{ ev.peers }} peer GPU{{ 's' if ev.peers != 1 }} ({{ ev.slower_than_peers_pct_before | v }} % before the change)."),
    "gpu_idle_gaps": (
        "The job's GPUs were busy {{ ev.busy_share_after | share }} of the time after the change ({{ ev.busy_share_before | share }} "
        "before) and kernel launches fell from {{ ev.launches_per_s_before | v }} to {{ ev.launches_per_s_after | v }} per second: "
        "the GPU waits for the host."),
    "contention": (
        "{{ ev.other_jobs_after }} other job{{ 's' if ev.other_jobs_after != 1 }} used {{ ev.other_busy_share_after | share }} "
        "of this job's GPU time after the change ({{ ev.other_jobs_before }} job{{ 's' if ev.other_jobs_before != 1 }}, "
        "{{ ev.other_busy_share_before | share }} before)"
        "{% if ev.gpu_uuid is defined %}, on GPU {{ gpu(ev.gpu_uuid) }}: {{ ev.gpu_other_busy_share_after | share }} of its time "
        "({{ ev.gpu_other_busy_share_before | share }} before){% endif %}."),
}
