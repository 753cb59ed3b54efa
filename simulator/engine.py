"""``simulate_fleet``: lay out a fleet, plan its jobs and injections, draw hour after hour, write shards.

Determinism: one ``numpy.random.Generator`` seeded with ``seed`` is consumed in a fixed order
(fleet, plan, then hour by hour), so the same arguments give the same rows; only shard file names
(which carry a random uuid, per the contract) differ between runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cudawatch import shards
from simulator.fleet import GPU_MODEL, build_fleet
from simulator.injections import Injection, default_injections, resolve, truth_record
from simulator.mix import build_mixed_fleet
from simulator.plan import build_plan
from simulator.tables import HourDrawer, host_slices

#: Collector window: 10 minutes, so an hourly shard holds 6 windows per (process, kernel signature).
DEFAULT_WINDOW_S = 600
#: Device sampling interval. The real node agent samples NVML every 1 s; 10 s keeps simulated
#: shards ten times smaller with the same hourly means.
DEFAULT_DEVICE_INTERVAL_S = 10


@dataclass
class GroundTruth:
    """What ``simulate_fleet`` wrote: the injected regressions (ground_truth.json records), the
    number of shard files, and the path of ground_truth.json."""

    regressions: list[dict]
    shards: int
    path: Path
    rows: dict[str, int] = field(default_factory=dict)


def _utc(start: dt.datetime) -> dt.datetime:
    if start.tzinfo is None:
        start = start.replace(tzinfo=dt.timezone.utc)
    return shards.hour_floor(start)


def simulate_fleet(
    out: str | os.PathLike,
    *,
    gpus: int,
    hours: int,
    seed: int,
    start: dt.datetime,
    injections: list[Injection] | None = None,
    window_s: int = DEFAULT_WINDOW_S,
    device_interval_s: int = DEFAULT_DEVICE_INTERVAL_S,
    writers: int = 4,
    jobs: int | None = None,
) -> GroundTruth:
    """Simulate ``gpus`` GPUs for ``hours`` hours from ``start`` and write shards under ``out``.

    injections: ``None`` for the default scenario (one regression of each core kind, onsets spread
    over the second half of the run), ``[]`` for a clean fleet, or explicit injections (see
    ``parse_injections``). window_s: collector window (divides 3600); device_interval_s: device
    sampling interval (divides window_s); writers: threads writing shards; jobs: ``None`` for the
    standard layout (docs/simulator.md), or a number of jobs of varied models, sizes and life cycles
    (``simulator.mix``). Writes one shard per (table, host, hour) and
    ``out/ground_truth.json``; returns a GroundTruth.
    """
    if gpus < 1 or hours < 1:
        raise ValueError(f"need gpus >= 1 and hours >= 1, got gpus={gpus}, hours={hours}")
    if window_s < 1 or 3600 % window_s:
        raise ValueError(f"window_s must divide 3600, got {window_s}")
    if device_interval_s < 1 or window_s % device_interval_s:
        raise ValueError(f"device_interval_s must divide window_s={window_s}, got {device_interval_s}")
    start = _utc(start)
    rng = np.random.default_rng(seed)
    fleet = build_fleet(gpus, rng) if jobs is None else build_mixed_fleet(gpus, jobs, hours, rng)
    names = {j.name for j in fleet.jobs}
    if injections is None:
        chosen = [i for i in default_injections(hours) if hours >= 2 and _default_job(i) in names]
    else:
        chosen = list(injections)
    resolved = [resolve(i, fleet, hours) for i in chosen]
    plan = build_plan(fleet, resolved, hours, start.hour, rng)
    drawer = HourDrawer(plan, start, rng, window_s=window_s, device_interval_s=device_interval_s)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    rows: dict[str, int] = {t: 0 for t in shards.SCHEMAS}
    # Parquet encoding and fsync release the GIL: write hour h on worker threads while hour h + 1
    # is drawn; at most two hours are in flight, so memory stays bounded.
    with ThreadPoolExecutor(max_workers=writers) as pool:
        in_flight: list = []
        for h in range(hours):
            hour = drawer.draw(h)
            when = start + dt.timedelta(hours=h)
            batch = []
            for table_name, table in hour.tables.items():
                rows[table_name] += table.num_rows
                for host, offset, length in host_slices(hour.hosts[table_name], len(fleet.hosts)):
                    batch.append(pool.submit(shards.write_shard, out, table_name, table.slice(offset, length), when,
                                             host=fleet.hosts[host], pid=0))
            for f in in_flight:
                f.result()
                written += 1
            in_flight = batch
        for f in in_flight:
            f.result()
            written += 1

    regressions = [truth_record(r, fleet, start) for r in resolved]
    doc = {
        "seed": seed,
        "gpus": gpus,
        "hours": hours,
        "jobs_arg": jobs,
        "start": start.isoformat(),
        "regressions": regressions,
        "window_s": window_s,
        "device_interval_s": device_interval_s,
        "gpu_model": GPU_MODEL,
        "hosts": fleet.hosts,
        "gpu_uuids": fleet.gpu_uuid,
        "jobs": [{"job": j.name, "workload": j.workload.name, "kind": j.workload.kind,
                  "gpu_uuids": [fleet.gpu_uuid[g] for g in j.gpus]} for j in plan.jobs],
        "rows": rows,
        "shards": written,
    }
    path = out / "ground_truth.json"
    tmp = out / ".ground_truth.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
    return GroundTruth(regressions, written, path, rows)


def _default_job(inj: Injection) -> str:
    from simulator.injections import DEFAULT_TARGETS

    return inj.job or DEFAULT_TARGETS[inj.kind][0]
