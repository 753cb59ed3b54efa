"""Injected regressions: the spec syntax, the default scenario, and resolution against a fleet.

A spec is ``kind=<kind>[,job=<job>][,kernel=<substring>][,hour=<h>][,pct=<p>][,gpu=<index>]``:
``hour`` is the onset as hours after the start, ``pct`` the magnitude in percent, ``gpu`` a
fleet-wide GPU index (``clock_throttle``, ``contention``, optionally the others). Omitted keys take
the kind's default target (the one the default scenario uses). ``none`` means a clean fleet.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from simulator.catalog import GEMM_TN_128, KernelSpec
from simulator.fleet import Fleet

#: Kinds every default scenario injects, in onset order.
CORE_KINDS = ("kernel_slowdown", "launch_config_change", "new_kernel", "more_launches", "pageable_memcpy", "clock_throttle")
#: Further kinds for root-cause work; not in the default scenario.
EXTRA_KINDS = ("memcpy_throughput_drop", "gpu_idle_gaps", "contention", "kernel_vanished")
KINDS = CORE_KINDS + EXTRA_KINDS

#: Kinds that name a kernel, and kinds that need one GPU.
KERNEL_KINDS = {"kernel_slowdown", "launch_config_change", "new_kernel", "more_launches", "kernel_vanished"}
GPU_KINDS = {"clock_throttle", "contention"}

#: kind -> (job, kernel substring or None, pct) of the default scenario.
DEFAULT_TARGETS: dict[str, tuple[str, str | None, float]] = {
    "kernel_slowdown": ("train-llama", GEMM_TN_128, 12.0),
    "launch_config_change": ("train-vit", "vectorized_layer_norm_kernel", 15.0),
    "new_kernel": ("serve-llama", "bitonicSortKVInPlace", 10.0),
    "more_launches": ("train-llama", "direct_copy_kernel_cuda", 20.0),
    "pageable_memcpy": ("train-vit", None, 15.0),
    "clock_throttle": ("train-llama", None, 18.0),
    "memcpy_throughput_drop": ("train-vit", None, 30.0),
    "gpu_idle_gaps": ("train-llama", None, 15.0),
    "contention": ("serve-llama", None, 20.0),
    "kernel_vanished": ("train-llama", "AllReduce_Sum", 100.0),
}

_KEYS = ("kind", "job", "kernel", "hour", "pct", "gpu")


@dataclass(frozen=True)
class Injection:
    """One regression to inject. ``None`` fields take the kind's default (see DEFAULT_TARGETS);
    ``hour`` None means the default scenario's onset for the kind."""

    kind: str
    job: str | None = None
    kernel: str | None = None
    hour: int | None = None
    pct: float | None = None
    gpu: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown injection kind {self.kind!r}; known kinds: {', '.join(KINDS)}")
        if self.pct is not None and not (0 < self.pct <= 1000):
            raise ValueError(f"injection pct must be in (0, 1000], got {self.pct}")
        if self.hour is not None and self.hour < 1:
            raise ValueError(f"injection hour must be >= 1 (an onset needs a baseline before it), got {self.hour}")


def parse_injections(specs: list[str]) -> list[Injection]:
    """Parse ``--inject`` specs; ``['none']`` gives ``[]`` (a clean fleet).

    Raises ValueError naming the spec for an unknown kind or key, a missing kind or a bad number.
    """
    out: list[Injection] = []
    for spec in specs:
        text = spec.strip()
        if text.lower() == "none":
            if len(specs) > 1:
                raise ValueError("'none' cannot be combined with other --inject specs")
            return []
        fields: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not value.strip():
                raise ValueError(f"injection spec {spec!r}: {part!r} is not key=value")
            if key not in _KEYS:
                raise ValueError(f"injection spec {spec!r}: unknown key {key!r}; known keys: {', '.join(_KEYS)}")
            fields[key] = value.strip()
        if "kind" not in fields:
            raise ValueError(f"injection spec {spec!r}: kind=... is required (one of {', '.join(KINDS)})")
        try:
            hour = int(fields["hour"]) if "hour" in fields else None
            pct = float(fields["pct"]) if "pct" in fields else None
            gpu = int(fields["gpu"]) if "gpu" in fields else None
        except ValueError as exc:
            raise ValueError(f"injection spec {spec!r}: {exc}") from None
        try:
            out.append(Injection(fields["kind"], fields.get("job"), fields.get("kernel"), hour, pct, gpu))
        except ValueError as exc:
            raise ValueError(f"injection spec {spec!r}: {exc}") from None
    return out


def default_onsets(hours: int, n: int = len(CORE_KINDS)) -> list[int]:
    """Onset hours of the default scenario: spread over the second half of the run, each leaving at
    least 8 hours after it (for short runs, a quarter of the run, at least 2 hours)."""
    tail = 8 if hours >= 32 else max(2, hours // 4)
    lo = max(1, hours // 2 + (1 if hours >= 32 else 0))
    hi = max(lo, hours - tail)
    return [int(round(x)) for x in (lo + (hi - lo) * i / max(1, n - 1) for i in range(n))]


def default_injections(hours: int) -> list[Injection]:
    """One injection of each core kind, at distinct onsets where the run is long enough."""
    return [Injection(kind, hour=h) for kind, h in zip(CORE_KINDS, default_onsets(hours))]


@dataclass(frozen=True)
class Resolved:
    """An injection resolved against a fleet: indices into it and the ground-truth record."""

    kind: str
    job: int
    kernel: KernelSpec | None
    gpu: int | None
    onset: int  # hour index
    pct: float

    @property
    def factor(self) -> float:
        return 1.0 + self.pct / 100.0


def resolve(inj: Injection, fleet: Fleet, hours: int, default_hour: int | None = None) -> Resolved:
    """Fill defaults and check the target exists; ValueError with the choices when it does not."""
    d_job, d_kernel, d_pct = DEFAULT_TARGETS[inj.kind]
    job_name = inj.job or d_job
    j = fleet.job_index(job_name)
    job = fleet.jobs[j]
    onset = inj.hour if inj.hour is not None else default_hour
    if onset is None:
        onset = default_onsets(hours)[0]
    if not 1 <= onset < hours:
        raise ValueError(f"{inj.kind}: onset hour {onset} is outside the run (1..{hours - 1})")
    kernel = None
    if inj.kind in KERNEL_KINDS:
        pool = job.workload.latent if inj.kind == "new_kernel" else job.workload.kernels
        needle = inj.kernel or d_kernel
        matches = [k for k in pool if needle in k.name]
        if not matches and inj.kind == "new_kernel":
            raise ValueError(f"new_kernel: no latent kernel of {job_name} matches {needle!r}; choices: "
                             + "; ".join(k.name[:80] for k in pool))
        if len(matches) != 1:
            names = "; ".join(k.name[:80] for k in (matches or pool))
            what = "matches several kernels" if matches else "matches no kernel"
            raise ValueError(f"{inj.kind}: {needle!r} {what} of job {job_name}: {names}")
        kernel = matches[0]
    gpu = inj.gpu
    if gpu is None and inj.kind in GPU_KINDS:
        gpu = job.gpus[min(2, len(job.gpus) - 1)]
    if gpu is not None:
        if not 0 <= gpu < fleet.gpus:
            raise ValueError(f"{inj.kind}: gpu {gpu} is outside the fleet (0..{fleet.gpus - 1})")
        if gpu not in job.gpus:
            raise ValueError(f"{inj.kind}: gpu {gpu} does not run job {job_name} (its GPUs: {list(job.gpus)})")
    return Resolved(inj.kind, j, kernel, gpu, onset, inj.pct if inj.pct is not None else d_pct)


def truth_record(r: Resolved, fleet: Fleet, start: dt.datetime) -> dict:
    """The ``ground_truth.json`` entry of a resolved injection."""
    onset = start + dt.timedelta(hours=r.onset)
    return {
        "job": fleet.jobs[r.job].name,
        "kernel": r.kernel.name if r.kernel else None,
        "kernel_id": r.kernel.kernel_id if r.kernel else None,
        "gpu_uuid": fleet.gpu_uuid[r.gpu] if r.gpu is not None else None,
        "onset": onset.isoformat(),
        "kind": r.kind,
        "magnitude_pct": r.pct,
        "host": fleet.hosts[int(fleet.gpu_host[r.gpu])] if r.gpu is not None else None,
    }
