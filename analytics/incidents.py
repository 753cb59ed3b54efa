"""One alert per incident: regressions with a shared cause and onset grouped into incidents.

Pure: takes ``analytics.results.Regression`` objects (with their ``causes``) and returns
``Incident`` objects; no SQL, no I/O, no clock. Reports, e-mail, Slack and JSON show incidents
first and their members inside.

Two regressions belong to one incident when their onsets are at most ``onset_hours`` apart and
they share a place:

- the same GPU: the regression's own ``gpu_uuid`` (clock series) or the ``gpu_uuid`` named in the
  evidence of its top cause when that cause is about a device (``clock_throttle``, ``contention``,
  ``straggler_gpu``, ``gpu_idle_gaps``): one GPU's contention slowing 36 kernels, a throttled GPU
  and the kernels it slowed;
- the same job, when both top causes say the job's kernel mix changed (``new_kernel``,
  ``kernel_vanished``, ``launch_config_changed``, ``more_launches``): a deploy;
- the same job and the same top cause otherwise (e.g. ``pageable_memcpy`` on two copy kinds).

A kernel or job regression whose onset was estimated later than its GPU's event (up to
``late_hours`` after it; same job, no GPU or other cause of its own, or ``kernel_slower``) is
linked to that GPU's event when the event slows kernels (the GPU's own series, ``clock_throttle``,
``straggler_gpu``, ``contention``): a throttled GPU slows every kernel of its job, and on a noisy
series pooled over the job's GPUs the sequential detector can place that step hours late, past the
2-hour window (docs/detection.md, "One alert per incident").

Links are transitive (union-find). The incident's cause is the rule most members name first
(ties: the higher summed confidence, then RULES order as the members' order; ``kernel_slower``
does not count where a member names a cause in SLOWING_CAUSES, its mechanism); its severity is
the highest member severity; its onset the earliest member onset; members are ordered by
severity, then |magnitude| x share of GPU time.

Identity: ``incident_id`` is the event id of a one-member incident (so an alert about a lone
regression keeps the key it always had) and a hash of the sorted member event ids otherwise. An
incident that gains members in a later hour would hash differently, so whoever remembers incidents
(the alert outbox) passes the ids it knows to ``adopt_ids``, which gives a regrouped incident the
id it was first alerted under.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from analytics.results import SEVERITIES, Regression

DEVICE_CAUSES = frozenset({"clock_throttle", "contention", "straggler_gpu", "gpu_idle_gaps"})
MIX_CAUSES = frozenset({"new_kernel", "kernel_vanished", "launch_config_changed", "more_launches"})
#: Device causes that slow every kernel of the job on that GPU (gpu_idle_gaps does not).
SLOWING_CAUSES = DEVICE_CAUSES - {"gpu_idle_gaps"}
#: Top causes (None: no cause) of a kernel or job regression that can be a slowed GPU's late symptom.
SYMPTOM_CAUSES = frozenset({None, "kernel_slower"})


@dataclass(frozen=True)
class Incident:
    """A group of regressions with one cause: members (most severe first), cause (a rule name or
    None when no member has a cause), severity, onset (earliest), scope ("gpu", "job") and key
    (the GPU uuid or the job), and a stable ``incident_id`` (same members' events, same id)."""

    members: tuple[Regression, ...]
    cause: str | None
    severity: str
    onset: dt.datetime
    scope: str
    key: str
    known_id: str | None = None  # the id it was first recorded under (adopt_ids)

    @property
    def incident_id(self) -> str:
        if self.known_id:
            return self.known_id
        if len(self.members) == 1:
            return self.members[0].event_id
        ids = sorted(r.event_id for r in self.members)
        return hashlib.sha1("|".join(ids).encode()).hexdigest()[:16]

    @property
    def top(self) -> Regression:
        """The member that matters most (most severe, then the largest impact)."""
        return self.members[0]

    @property
    def cause_label(self) -> str:
        """The cause for people (``new kernel``), or ``no common cause``."""
        return self.cause.replace("_", " ") if self.cause else "no common cause"

    @property
    def place(self) -> str:
        """The GPU's ``host:index`` (its uuid when unknown) or the job; raw (escape it to show it)."""
        if self.scope == "gpu":
            return next((r.gpu_label for r in self.members if r.gpu_uuid == self.key and r.gpu_label), self.key)
        return self.key

    @property
    def where(self) -> str:
        """``GPU host:index`` or ``job NAME`` (raw)."""
        return f"{'GPU' if self.scope == 'gpu' else 'job'} {self.place}"

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(sorted({r.job for r in self.members if r.job}))

    def to_json(self) -> dict:
        return {"incident_id": self.incident_id, "cause": self.cause, "severity": self.severity,
                "onset": self.onset.isoformat(), "scope": self.scope, "key": self.key, "jobs": list(self.jobs),
                "member_count": len(self.members), "members": [r.to_json() for r in self.members]}


def adopt_ids(incidents: Iterable[Incident], known: Mapping[str, str]) -> list[Incident]:
    """``incidents`` with the ids recorded for their members: ``known`` maps event id -> incident id
    (e.g. from the alert outbox). An incident whose members carry ids takes the smallest of them
    (two recorded incidents that a later hour links stay under one, stable, id); the others keep
    their own. An id goes to one incident only: when a recorded incident splits, the first part
    (in ``incidents``' order) keeps it and the rest take their own, so ids stay unique."""
    out, taken = [], set()
    for inc in incidents:
        ids = sorted({known[r.event_id] for r in inc.members if known.get(r.event_id)} - taken)
        taken.update(ids[:1])
        out.append(replace(inc, known_id=ids[0]) if ids else inc)
    return out


def _gpu_of(r: Regression) -> str | None:
    if r.gpu_uuid:
        return r.gpu_uuid
    top = r.top_cause
    if top is not None and top.rule in DEVICE_CAUSES:
        g = top.evidence.get("gpu_uuid") if hasattr(top.evidence, "get") else None
        return str(g) if g else None
    return None


def _places(r: Regression) -> list[tuple]:
    top = r.top_cause.rule if r.top_cause else None
    out = []
    g = _gpu_of(r)
    if g:
        out.append(("gpu", g))
    if r.job:
        if top in MIX_CAUSES:
            out.append(("mix", r.job))
        elif top is not None and g is None:
            out.append(("cause", r.job, top))
    return out


def _slows_gpu(r: Regression) -> str | None:
    """The GPU of a regression whose cause slows every kernel on it (its own clock series, or a
    top cause in SLOWING_CAUSES), else None."""
    if r.gpu_uuid:
        return r.gpu_uuid
    return _gpu_of(r) if r.top_cause is not None and r.top_cause.rule in SLOWING_CAUSES else None


def _late_symptoms(regs: list[Regression], late: dt.timedelta) -> list[tuple[int, int]]:
    """(GPU event, later regression) pairs: same job, the later one without a GPU of its own, with
    no cause or ``kernel_slower``, and an onset at or after the GPU event's by at most ``late``.
    Each such regression joins only the nearest GPU event before it (the latest onset), so one
    symptom never merges two GPUs' incidents."""
    anchors = [(i, r) for i, r in enumerate(regs) if r.job and _slows_gpu(r)]
    out = []
    for j, s in enumerate(regs):
        if not s.job or _gpu_of(s) or (s.top_cause.rule if s.top_cause else None) not in SYMPTOM_CAUSES:
            continue
        cands = [(r.onset, -i, i) for i, r in anchors if r.job == s.job and dt.timedelta(0) <= s.onset - r.onset <= late]
        if cands:
            out.append((max(cands)[2], j))
    return out


def group_incidents(regressions: Iterable[Regression], *, onset_hours: float = 2.0,
                    late_hours: float = 6.0) -> list[Incident]:
    """Incidents of ``regressions`` (each regression in exactly one), most severe first.

    A regression without a shared place (no GPU, no cause) is an incident of its own, unless it is
    a late-estimated symptom of a slowed GPU of its job (``late_hours``; 0: off; module docstring)."""
    regs = list(regressions)
    parent = list(range(len(regs)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    near = dt.timedelta(hours=onset_hours)
    by_place: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(regs):
        for p in _places(r):
            by_place[p].append(i)
    for members in by_place.values():
        members.sort(key=lambda i: regs[i].onset)
        for a, b in zip(members, members[1:]):
            if regs[b].onset - regs[a].onset <= near:
                parent[find(b)] = find(a)
    for a, b in _late_symptoms(regs, dt.timedelta(hours=late_hours)) if late_hours > 0 else ():
        parent[find(b)] = find(a)
    groups: dict[int, list[Regression]] = defaultdict(list)
    for i, r in enumerate(regs):
        groups[find(i)].append(r)
    out = [_incident(m) for m in groups.values()]
    return sorted(out, key=lambda x: (-SEVERITIES.index(x.severity), x.onset, x.incident_id))


def _impact(r: Regression) -> float:
    return min(abs(r.magnitude_pct), 1000.0) * (r.share_gpu_time or 1.0)


def _incident(members: list[Regression]) -> Incident:
    members = sorted(members, key=lambda r: (-SEVERITIES.index(r.severity), -_impact(r), r.event_id))
    firsts = Counter(r.top_cause.rule for r in members if r.top_cause)
    if firsts.keys() & SLOWING_CAUSES:
        firsts.pop("kernel_slower", None)  # the slowed GPU is the mechanism, slower kernels its symptom
    conf: dict[str, float] = defaultdict(float)
    for r in members:
        if r.top_cause:
            conf[r.top_cause.rule] += r.top_cause.confidence
    cause = max(firsts, key=lambda c: (firsts[c], conf[c])) if firsts else None
    gpus = Counter(g for g in map(_gpu_of, members) if g)
    if gpus:
        scope, key = "gpu", gpus.most_common(1)[0][0]
    else:
        scope, key = "job", Counter(r.job for r in members).most_common(1)[0][0]
    return Incident(tuple(members), cause, members[0].severity, min(r.onset for r in members), scope, key)
