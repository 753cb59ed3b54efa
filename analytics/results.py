"""Result types that analytics produces and reports/alerts consume.

Frozen dataclasses only: no I/O here. ``Regression.to_json()`` is the shape printed by
``cudawatch analyze --json`` (see docs/detection.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

SEVERITIES = ("low", "medium", "high", "critical")


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

    @property
    def event_id(self) -> str:
        """Stable id of the event: same series and onset give the same id on every run."""
        key = "|".join(str(x) for x in (self.job, self.kernel_id, self.gpu_uuid, self.series, self.signature, self.onset.isoformat()))
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    @property
    def change_label(self) -> str:
        """The change for people: ``+12.3%``, or ``new (was 0)`` / ``gone (now 0)`` when the series
        starts from or falls to zero (the detector caps such magnitudes at +-1000 %)."""
        m = self.magnitude_pct
        if m != m:
            return "n/a"
        if m == float("inf") or (self.before == 0 and self.after > 0):
            return "new (was 0)"
        if m == float("-inf") or (self.after == 0 and self.before > 0):
            return "gone (now 0)"
        return f"{m:+.1f}%"

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
            "p_value": self.p_value,
            "severity": self.severity,
            "share_gpu_time": round(self.share_gpu_time, 4),
            "status": self.status,
            "causes": [f.rule for f in sorted(self.causes, key=lambda f: -f.confidence)],
        }
