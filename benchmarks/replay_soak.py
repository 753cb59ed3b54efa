"""The collector's session without CUPTI at a soak's record rate: does its memory grow?

The LM soaks on the GPU (docs/benchmarks.md §4, §9, §14) grow 0.56-0.99 MiB a minute after their
first minutes, and it is open whether that is the collector's. This runs the product's session
(``collector.start()``: duty controller, on/off cycles, windows, health notes, spool, the hourly
check, the ``.status`` file, the stop) in a process that does nothing else, with ``ReplayTracer``
(``CUDAWATCH_REPLAY``) standing in for the whole ``CuptiTracer``: real H200 records
(``tests/data/cupti/records.jsonl.gz``, 45 kernel signatures) replayed ``--speed`` times faster
(~34 k records/s while on at speed 64; the LM soaks' on-phases ran 26-33 k/s). It samples the
process RSS (and threads, anonymous RSS and mappings: ``proc``) every ``--sample-s`` while the session runs and reports what the soak reports: growth
after the first 2 minutes, the least-squares slopes over 245-905 s and 540-905 s, and the Theil-Sen
slope over the second half (MiB a minute); the RSS after the stop (which writes the last shards) is
reported apart. Shards are written mid-run only if the run crosses an hour.

Not exercised (so a small slope clears only the rest): CUPTI itself (attach, finalize, its device
and host buffers, its thread delivering records while the collector's thread writes windows: the
replay delivers on the collector's thread) and everything of ``CuptiTracer`` around it: the
per-record callback (``_completed``; the replay feeds ``Aggregator.add_kernels``, which ends in the
same ``add_kernel_rows``), the detach drain's wait and bookkeeping and its fence's driver calls,
``DetachFinalizer``, ``malloc_trim`` after each detach, the dropped-records query, OVERHEAD records
and the NVML device map; and the collector sharing a heap with a training process. No GPU needed.

    python benchmarks/replay_soak.py --seconds 930 --json replay_soak.json
    python benchmarks/replay_soak.py --seconds 600 --census-from 245 [--trace-python] --json census.json

``--census-from S`` adds a heap census at S seconds and at the end (pyarrow's memory pool, objects
the garbage collector tracks, with ``--trace-python`` the Python memory traced by tracemalloc and
the Python allocation sites that grew in between) and the memory regions whose RSS grew
(``gpu_workloads.smaps_census``). Neither tracemalloc nor the pool's count sees memory an allocator
keeps after a free (pymalloc arenas, glibc's or mimalloc's free lists); the regions do. Tracing
slows the session's Python several times over.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gpu_workloads  # noqa: E402  (benchmarks/)
from step_log import TAIL_FROM_S, TAIL_TO_S, rss_measures, theil_sen_mib_per_min  # noqa: E402

RECORDS = HERE.parent / "tests" / "data" / "cupti" / "records.jsonl.gz"


def summarize(rss: list[tuple[float, float]], seconds: float) -> dict:
    """The soak's memory measures (``step_log.rss_measures``, as ``step_log.py rss`` reads the GPU
    soaks) of an RSS series ``[(t s, MiB), ...]`` sampled while the session ran, and the Theil-Sen
    slope over its second half; None where the run is too short for one."""
    t, r = np.asarray(rss, dtype=float).T
    early, late = rss_measures(t, r, TAIL_FROM_S, TAIL_TO_S), rss_measures(t, r, 540, TAIL_TO_S)
    half = theil_sen_mib_per_min([p for p in rss if p[0] >= seconds / 2])
    return {"rss_start_mib": rss[0][1], "rss_end_mib": rss[-1][1],
            "rss_growth_after_2min_mib": early["growth_after_2min_mib"],
            "rss_slope_245_905_mib_per_min": early["slope_mib_per_min"],
            "rss_slope_540_905_mib_per_min": late["slope_mib_per_min"],
            "rss_theil_sen_second_half_mib_per_min": None if math.isnan(half) else half}


def _heap_census() -> dict:
    """What Python and pyarrow hold now: traced Python blocks (with ``--trace-python``), pyarrow's
    memory pool, and objects the garbage collector tracks."""
    import gc

    import pyarrow as pa

    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
    return {"python_traced_mib": None if traced is None else traced / 2**20,
            "tracemalloc_own_mib": tracemalloc.get_tracemalloc_memory() / 2**20 if traced is not None else None,
            "pyarrow_pool_mib": pa.total_allocated_bytes() / 2**20, "pyarrow_pool": pa.default_memory_pool().backend_name,
            "gc_objects": len(gc.get_objects())}


def _growth_sites(first, last, top: int = 15) -> list[dict]:
    """The ``top`` allocation sites (the snapshots' innermost frames, innermost first) whose live
    Python memory grew most between two tracemalloc snapshots."""
    stats = last.compare_to(first, "traceback")
    return [{"size_diff_kib": round(st.size_diff / 1024, 1), "count_diff": st.count_diff,
             "frames": [f"{Path(f.filename).name}:{f.lineno}" for f in reversed(st.traceback)]}  # innermost first
            for st in stats[:top]]


def soak(seconds: float, speed: float, sample_s: float = 5.0, *, out: str | None = None,
         census_from_s: float | None = None, trace_python: bool = False) -> dict:
    """``census_from_s``: census the heap and the memory regions at that time and at the end of the
    run (before the stop); ``trace_python``: trace Python allocations too (tracemalloc, 5 frames) and
    report the sites that grew in between."""
    settings = {k: v for k, v in os.environ.items()  # the caller's, recorded: the collector's and the allocators'
                if k.startswith(("CUDAWATCH_", "MALLOC_", "ARROW_")) or k in ("PYTHONMALLOC", "LD_PRELOAD")}
    os.environ["CUDAWATCH_REPLAY"] = str(RECORDS)
    os.environ["CUDAWATCH_REPLAY_SPEED"] = str(speed)
    import collector

    out = Path(out or tempfile.mkdtemp(prefix="cw-replay-soak-"))
    if census_from_s is not None and trace_python:
        tracemalloc.start(5)
    t0 = time.monotonic()
    rss = [(0.0, gpu_workloads.rss_mib())]
    proc = [(0.0, *gpu_workloads.proc_census())]  # (t, threads, anonymous RSS MiB, mappings), as soak.py's
    s = collector.start(job="replay-soak", out=out)
    if not s.active:
        raise SystemExit(f"collector did not start: {s.reason}")
    census, first, regions = {}, None, None
    while time.monotonic() - t0 < seconds:
        time.sleep(sample_s)
        rss.append((time.monotonic() - t0, gpu_workloads.rss_mib()))
        proc.append((rss[-1][0], *gpu_workloads.proc_census()))
        if census_from_s is not None and regions is None and rss[-1][0] >= census_from_s:
            if tracemalloc.is_tracing():  # kept on disk (not in the shard root), not in this process's RSS
                fd, name = tempfile.mkstemp(prefix="cw-replay-soak-", suffix=".snapshot")
                os.close(fd)
                first = Path(name)
                tracemalloc.take_snapshot().dump(name)
            census["from"] = {"t_s": time.monotonic() - t0, "rss_mib": gpu_workloads.rss_mib(), **_heap_census()}
            regions = gpu_workloads.smaps_census()
    if regions is not None:
        census["to"] = {"t_s": time.monotonic() - t0, "rss_mib": gpu_workloads.rss_mib(), **_heap_census()}
        census["regions"] = gpu_workloads.smaps_growth(regions, gpu_workloads.smaps_census())
        if first is not None:
            census["growth_sites"] = _growth_sites(tracemalloc.Snapshot.load(str(first)), tracemalloc.take_snapshot())
            first.unlink()
    tracemalloc.stop()
    collector.stop()  # its final detach delivers what the last on-phase traced: count after it
    after_stop = gpu_workloads.rss_mib()  # the stop writes the last shards: reported apart, as the soak's
    # training process samples only while it trains
    kernels, copies = s.tracer.kernels, s.tracer.copies
    cycles = sum(1 for row in s.duty_log if row[5] > 0)  # on-phases ended by a detach (memory.py's count)
    return {"seconds": seconds, "speed": speed, "sample_s": sample_s, "settings": settings,
            "records": kernels + copies, "kernels": kernels, "copies": copies, "records_per_s": (kernels + copies) / seconds,
            "cycles": cycles, "controller_duty_at_end": s.controller.duty,
            "shards": sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")),
            **summarize(rss, seconds), "rss_after_stop_mib": after_stop,
            "rss": rss, "proc": proc, "python": platform.python_version(), "machine": platform.node(),
            **({"heap": census} if census else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=930.0)
    ap.add_argument("--speed", type=float, default=64.0, help="replay speed-up (64: ~34 k records/s while on)")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--out", help="folder for the shards (default: a new temporary folder)")
    ap.add_argument("--census-from", type=float, metavar="S",
                    help="census the heap and memory regions at S seconds and at the end, and report what grew")
    ap.add_argument("--trace-python", action="store_true",
                    help="with --census-from: trace Python allocations too (tracemalloc; slows the session several times over)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.trace_python and a.census_from is None:
        ap.error("--trace-python needs --census-from")
    if a.census_from is not None and a.census_from >= a.seconds:
        ap.error(f"--census-from {a.census_from:g} is not before the end of the run (--seconds {a.seconds:g})")
    res = soak(a.seconds, a.speed, a.sample_s, out=a.out, census_from_s=a.census_from, trace_python=a.trace_python)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("rss", "proc", "shards")}, indent=1))


if __name__ == "__main__":
    main()
