"""Result types that analytics produces and reports/alerts consume.

Frozen dataclasses only: no I/O here. ``Regression.to_json()`` is the shape printed by
``cudawatch analyze --json`` (see docs/detection.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

SEVERITIES = ("low", "medium", "high", "critical")

#: A series that starts from 0 (a new kernel's share) has an infinite relative change; regressions
#: report it as +1000 % so that JSON, charts and sorting stay finite.
MAX_MAGNITUDE_PCT = 1000.0


@dataclass(frozen=True)
class Metric:
    """What a series measures, for people: ``label`` ("per-launch time"), ``of`` (whose: "this
    kernel", "the job", "the GPU"), display ``unit`` and ``scale`` (raw value * scale = shown)."""

    label: str
    of: str
    unit: str
    scale: float = 1.0

    @property
    def name(self) -> str:
        return f"{self.label} of {self.of}"

    @property
    def title(self) -> str:
        """``name`` with a capital first letter (``SM clock of the GPU``)."""
        return self.name[:1].upper() + self.name[1:]


#: Every detector series (analytics.store.series.SPECS) with its human label and display unit.
METRICS: dict[str, Metric] = {
    "kernel_mean_ns": Metric("per-launch time", "this kernel", "µs", 1e-3),
    "kernel_id_mean_ns": Metric("per-launch time (all launch configurations)", "this kernel", "µs", 1e-3),
    "kernel_time_share": Metric("share of job GPU time", "this kernel", "%", 100.0),
    "kernel_launch_share": Metric("share of job launches", "this kernel", "%", 100.0),
    "kernel_presence": Metric("hours it ran (1 = ran)", "this kernel", "", 1.0),
    "job_gpu_busy_s": Metric("GPU time per hour", "the job", "s", 1.0),
    "job_busy_share": Metric("GPU busy share of wall time", "the job", "%", 100.0),
    "memcpy_ns_per_byte": Metric("copy time per byte", "these copies", "ns/B", 1.0),
    "gpu_sm_clock_mhz": Metric("SM clock", "the GPU", "MHz", 1.0),
    "gpu_mem_clock_mhz": Metric("memory clock", "the GPU", "MHz", 1.0),
}


def metric_of(series: str) -> Metric:
    """The Metric of a series name (an unknown name is shown as itself, without a unit)."""
    return METRICS.get(series) or Metric(series.replace("_", " "), "the series", "", 1.0)


def size_pct(before: float, after: float) -> float:
    """THE size of a change, in percent: 100 * (after - before) / |before|, capped at
    +-MAX_MAGNITUDE_PCT (a series from 0 is +1000 %). The detector stores it with the event; every
    view shows it through ``Regression.size``."""
    if before is None or after is None or before != before or after != after:
        return float("nan")
    if before == 0:
        return 0.0 if after == 0 else math.copysign(MAX_MAGNITUDE_PCT, after)
    return max(-MAX_MAGNITUDE_PCT, min(MAX_MAGNITUDE_PCT, 100.0 * (after - before) / abs(before)))


def fmt_value(value: float | None) -> str:
    """A display value at a human scale: thousands separators from 1,000, one decimal from 10
    (1,980 · 693.1 · 60.9), three significant digits below (3.07 · 0.0449)."""
    if value is None or value != value:
        return "–"
    if value == 0:
        return "0"
    mag = abs(value)
    if mag >= 1000:
        return f"{value:,.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


@dataclass(frozen=True)
class Size:
    """The size of one regression, as every view shows it: metric, before and after in display
    units, the relative change (``size_pct`` of the raw values) and the unit."""

    metric: Metric
    before: float
    after: float
    pct: float

    @property
    def unit(self) -> str:
        return self.metric.unit

    @property
    def change(self) -> str:
        """``+13.3%``, or ``new (was 0)`` / ``gone (now 0)`` for a series from or to zero."""
        if self.pct != self.pct:
            return "n/a"
        if self.before == 0 and self.after > 0:
            return "new (was 0)"
        if self.after == 0 and self.before > 0:
            return "gone (now 0)"
        return f"{self.pct:+.1f}%"

    @property
    def values(self) -> str:
        """``612.0 → 693.1 µs``"""
        unit = f" {self.unit}" if self.unit else ""
        return f"{fmt_value(self.before)} → {fmt_value(self.after)}{unit}"

    @property
    def text(self) -> str:
        """``per-launch time of this kernel +13.3% (612.0 → 693.1 µs)``"""
        return f"{self.metric.name} {self.change} ({self.values})"

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric.name, "unit": self.unit, "before": self.before, "after": self.after,
                "change_pct": round(self.pct, 1)}


@dataclass(frozen=True)
class Finding:
    """One root-cause rule's verdict on one regression.

    rule: a name from analytics.rules.RULES (the fixed vocabulary of ``causes``).
    confidence: 0..1, used to rank findings.
    evidence: numbers before/after (and other facts) the report shows.
    recommendation: one line telling the user what to do.
    """

    rule: str
    confidence: float
    evidence: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    recommendation: str = ""


@dataclass(frozen=True)
class Regression:
    """One regression event: a significant, sustained change of a series the bad way.

    series: which metric moved (e.g. ``kernel_mean_ns``, ``kernel_launches``, ``job_gpu_busy_s``,
    ``gpu_sm_clock_mhz``); signature: the launch configuration of a kernel series, if any.
    onset: the first UTC hour of the new segment. before/after: segment means of the series.
    share_gpu_time: the kernel's share of its job's GPU time after onset (0..1).
    status: new | ongoing | resolved | went_away.
    """

    job: str
    kernel: str | None
    kernel_id: str | None
    gpu_uuid: str | None
    series: str
    onset: dt.datetime
    before: float
    after: float
    magnitude_pct: float
    p_value: float
    severity: str
    share_gpu_time: float = 0.0
    signature: str | None = None
    status: str = "new"
    detected_at: dt.datetime | None = None
    causes: tuple[Finding, ...] = ()
    gpu_host: str | None = field(default=None, compare=False)
    gpu_index: int | None = field(default=None, compare=False)

    @property
    def event_id(self) -> str:
        """Stable id of the event: same series and onset give the same id on every run."""
        key = "|".join(str(x) for x in (self.job, self.kernel_id, self.gpu_uuid, self.series, self.signature, self.onset.isoformat()))
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    @property
    def metric(self) -> Metric:
        return metric_of(self.series)

    @property
    def size(self) -> Size:
        """The one size of this regression (its stored before/after and magnitude_pct, which the
        detector computes with ``size_pct``), in display units."""
        m = self.metric
        return Size(m, self.before * m.scale, self.after * m.scale, self.magnitude_pct)

    @property
    def change_label(self) -> str:
        """The change for people: ``+12.3 %``, or ``new (was 0)`` / ``gone (now 0)`` when the series
        starts from or falls to zero (the detector caps such magnitudes at +-1000 %)."""
        return self.size.change

    @property
    def gpu_label(self) -> str | None:
        """``host:index`` of the regression's GPU when known (``gpu_host``/``gpu_index``), else its UUID."""
        if self.gpu_uuid is None:
            return None
        if self.gpu_host is not None and self.gpu_index is not None:
            return f"{self.gpu_host}:{self.gpu_index}"
        return self.gpu_uuid

    @property
    def top_cause(self) -> Finding | None:
        return max(self.causes, key=lambda f: f.confidence) if self.causes else None

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "job": self.job,
            "kernel": self.kernel,
            "kernel_id": self.kernel_id,
            "gpu_uuid": self.gpu_uuid,
            "series": self.series,
            "signature": self.signature,
            "onset": self.onset.isoformat(),
            "before": self.before,
            "after": self.after,
            "magnitude_pct": round(self.magnitude_pct, 3),
            "size": self.size.to_json(),
            "gpu": self.gpu_label,
            "p_value": self.p_value,
            "severity": self.severity,
            "share_gpu_time": round(self.share_gpu_time, 4),
            "status": self.status,
            "causes": [f.rule for f in sorted(self.causes, key=lambda f: -f.confidence)],
        }
