"""Helpers the rule modules share: building a Finding with rounded evidence, ratios, impact."""

from __future__ import annotations

import math
from typing import Any

from analytics.context import RegressionContext, Window
from analytics.results import Finding


def finding(rule: str, confidence: float, evidence: dict[str, Any], recommendation: str) -> Finding:
    """A Finding with confidence clamped to [0, 1] and floats rounded for display and JSON."""
    return Finding(rule, round(min(1.0, max(0.0, confidence)), 3), {k: _round(v) for k, v in evidence.items()}, recommendation)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return value if not math.isfinite(value) else float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def change(before: float | None, after: float | None) -> float | None:
    """Relative change after/before - 1, or None when it is undefined."""
    if before is None or after is None or before <= 0:
        return None
    return after / before - 1.0


def strength(value: float, low: float, high: float) -> float:
    """0 at ``low``, 1 at ``high`` and beyond: scales a confidence between a rule's floor and cap."""
    if high <= low:
        return 1.0
    return min(1.0, max(0.0, (value - low) / (high - low)))


def gpu_s_per_hour(window: Window, total_ns: float) -> float:
    return window.per_hour(total_ns) / 1e9


def job_delta_gpu_s(ctx: RegressionContext) -> float:
    """How much the job's kernel time per hour grew at onset (seconds per hour, may be negative)."""
    return ctx.after.per_hour(ctx.after.busy_s) - ctx.before.per_hour(ctx.before.busy_s)


def in_scope(ctx: RegressionContext, kernel_id: str) -> bool:
    """Whether a kernel belongs to the regression: its own kernel, or any kernel of a job-level one."""
    return ctx.scope != "kernel" or ctx.regression.kernel_id == kernel_id


def job_gpus(ctx: RegressionContext) -> list[str]:
    """GPUs the rules look at: the regression's GPU if it has one, else every GPU of the job."""
    if ctx.regression.gpu_uuid:
        return [ctx.regression.gpu_uuid]
    gpus = {g for g, _ in ctx.before.gpu_kernels} | {g for g, _ in ctx.after.gpu_kernels}
    return sorted(gpus | set(ctx.before.devices) | set(ctx.after.devices))


def median_se(values) -> float:
    """Standard error of a sample median from the MAD (1.2533 * 1.4826 * MAD / sqrt(n)).

    Robust to an outlier hour; with fewer than 3 values the error is unknown (infinite).
    """
    vals = sorted(float(v) for v in values)
    n = len(vals)
    if n < 3:
        return math.inf
    med = _median(vals)
    mad = _median(sorted(abs(v - med) for v in vals))
    return 1.2533 * 1.4826 * mad / math.sqrt(n)


def robust_sd(values) -> float:
    """1.4826 * MAD: a standard deviation that one outlier hour does not inflate (0 for < 3 values)."""
    vals = sorted(float(v) for v in values)
    if len(vals) < 3:
        return 0.0
    med = _median(vals)
    return 1.4826 * _median(sorted(abs(v - med) for v in vals))


def beyond_noise(before, after, k: float = 3.0) -> bool:
    """Whether the medians of two hourly samples differ by more than k combined standard errors."""
    se = math.hypot(median_se(before), median_se(after))
    if not math.isfinite(se):
        return False
    return abs(_median(sorted(after)) - _median(sorted(before))) > k * se


def _median(vals) -> float:
    n = len(vals)
    if n == 0:
        return math.nan
    return vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])
