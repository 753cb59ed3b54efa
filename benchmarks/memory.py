"""Collector memory growth and shard volume on a real small PyTorch training loop.

  python benchmarks/memory.py train --seconds 20           # the training loop alone (used under cudawatch collect)
  python benchmarks/memory.py measure --seconds 150 --json mem.json [--no-collector]
  python benchmarks/memory.py cycles --cycles 60           # RSS kept per CUPTI detach/attach cycle
  CUDAWATCH_MAX_OVERHEAD_PCT=50 python benchmarks/memory.py measure --seconds 90 --duty 0.1 [--no-trim]
      # many detach/attach cycles (a ~1.2 s period, duty pinned) through the product path: RSS kept per cycle

``measure`` starts the collector in-process (default settings, 60 s windows unless
CUDAWATCH_WINDOW_S or a longer CUDAWATCH_PERIOD_S says otherwise), trains for ``--seconds`` and samples the process RSS every 2 s.
It reports the RSS slope (least squares over the run after the first 20 %, MiB per minute), the
peak growth, the collector's open signatures, the traced fraction actually used (time-weighted
``sampling_duty`` of the health rows; the controller's duty at the end is reported separately),
records delivered, without timestamps and dropped, and the shard volume: bytes actually written, and an
extrapolation to one GPU-day made by writing one hour of real windows (the busiest real window
repeated with shifted timestamps) as a shard with ``write_shard`` and multiplying its size by 24.
It also reports the detach/attach cycles and the RSS slope per cycle (least squares after the first
20 %, and a Theil-Sen slope over the second half, which one-off steps move far less), and the slope of Python's
allocated blocks (``sys.getallocatedblocks``, cheap) so growth can be told apart: Python objects or
native memory (CUPTI, glibc); the slope of anonymous RSS, the thread and mapping counts (first, last,
max; ``proc_census``) and the activity buffers requested and completed, so native growth can be
told apart further: threads CUPTI did not join, allocator arenas, buffers never handed back. ``--duty`` pins the traced fraction (the controller would otherwise
go to full tracing, i.e. no cycles, when the budget allows it); ``--no-trim`` turns off the
collector's ``malloc_trim`` after each detach. (``tracemalloc`` was tried on the H200 and dropped:
it slowed the loop 2x and its own bookkeeping dominated the RSS.) ``--census`` instead counts the
garbage-collected objects by type twice, at 20 % of the run and at its end, and reports the types
that grew most (``census_growth``): two passes over ``gc.get_objects()``, cheap enough to leave the
loop's timing alone, and it names what a growth in allocator blocks is made of when those objects
are containers (strings, bytes, numbers, and tuples and dicts holding only those are not tracked
by the collector and do not show). The first census collects garbage at 20 % of the run, which
moves the RSS and block slopes from there on: compare census runs with census runs.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import tempfile
import threading
import time
from pathlib import Path

import gpu_workloads  # benchmarks/, the script's folder
from step_log import least_squares_mib_per_min, theil_sen_mib_per_min


def train(seconds: float, log_every: int = 0, workload: str = "cnn") -> int:
    """Run the small real training loop (gpu_workloads.cnn_step), or the launch-bound loop
    (``workload="launch"``: gpu_workloads.launch_step), for ``seconds``; returns steps."""
    import torch

    step = gpu_workloads.launch_step() if workload == "launch" else gpu_workloads.cnn_step(log_every)
    steps, t_end = 0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        step()
        steps += 1
    torch.cuda.synchronize()
    return steps


def day_volume(root: Path, tmp: Path) -> dict:
    """Extrapolate shard bytes per GPU-day from the busiest real window under ``root``."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.compute as pc

    from cudawatch.shards import list_shards, read_shard, write_shard

    out = {}
    day_bytes = 0
    for table in ("kernels", "memcpy", "health"):
        files = list_shards(root, table)
        if not files:
            continue
        data = pa.concat_tables([read_shard(f, table) for f in files])
        starts = data.column("window_start").to_pylist()
        busiest = max(set(starts), key=starts.count)
        one = data.filter(pc.equal(data.column("window_start"), pa.scalar(busiest, data.schema.field("window_start").type)))
        window_s = int(one.column("window_s")[0].as_py())
        hour0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        parts = []
        for i in range(3600 // window_s):
            ts = pa.array([hour0 + dt.timedelta(seconds=i * window_s)] * one.num_rows, data.schema.field("window_start").type)
            parts.append(one.set_column(one.schema.get_field_index("window_start"), "window_start", ts))
        path = write_shard(tmp, table, pa.concat_tables(parts), hour0)
        size = path.stat().st_size
        out[table] = {"rows_per_window": one.num_rows, "hour_shard_bytes": size}
        day_bytes += 24 * size
    out["mb_per_gpu_day"] = day_bytes / 1e6
    return out


def type_census() -> collections.Counter:
    """Reachable garbage-collected objects by ``module.qualname`` of their type (a collection first, so
    garbage waiting for the collector is not counted), and their total under ``"*"``."""
    gc.collect()
    objs = gc.get_objects()
    by_type = collections.Counter(map(type, objs))
    out = collections.Counter({f"{t.__module__}.{t.__qualname__}": n for t, n in by_type.items()})
    out["*"] = len(objs)
    return out


def census_growth(before: collections.Counter, after: collections.Counter, top: int = 15) -> list[tuple[str, int]]:
    """The ``top`` types whose object count grew most from ``before`` to ``after`` (growth > 0 only)."""
    grew = [(k, after[k] - before.get(k, 0)) for k in after]
    return sorted((g for g in grew if g[1] > 0), key=lambda g: (-g[1], g[0]))[:top]


def measure(seconds: float, collect: bool, *, trim: bool = True, duty: float | None = None,
            census: bool = False, workload: str = "cnn") -> dict:
    import sys

    root = Path(tempfile.mkdtemp(prefix="cw-mem-"))
    session = None
    rss0 = gpu_workloads.rss_mib()
    if collect:
        import collector

        if not trim:
            import collector.tracer

            collector.tracer.trim_heap = lambda: 0

        session = collector.start(job="memory-bench", out=root)
        if not session.active:
            raise SystemExit(f"collector did not start: {session.reason}")
        if duty is not None:
            gpu_workloads.pin_duty(session, duty)
    wall0 = time.time()
    samples: list[tuple[float, float]] = []
    blocks: list[tuple[float, float]] = []  # (t, Python allocator blocks in thousands)
    sigs: list[int] = []
    procs: list[tuple[float, int, float, int]] = []  # (t, threads, anonymous RSS MiB, mappings)
    censuses: list[collections.Counter] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler():
        while not stop.wait(2.0):
            samples.append((time.monotonic() - t0, gpu_workloads.rss_mib()))
            blocks.append((samples[-1][0], sys.getallocatedblocks() / 1e3))
            procs.append((samples[-1][0], *gpu_workloads.proc_census()))
            if session is not None:
                sigs.append(session.agg.signatures())
            if census and not censuses and samples[-1][0] >= 0.2 * seconds:
                censuses.append(type_census())

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    steps = train(seconds, workload=workload)
    stop.set()
    th.join()
    if censuses:  # the second census before the collector stops (stopping frees its objects)
        result_census = census_growth(censuses[0], type_census())
    result = {"collector": collect, "workload": workload, "seconds": seconds, "steps": steps, "rss_start_mib": rss0,
              "rss_end_mib": samples[-1][1] if samples else None, "rss_samples": samples}
    tail = [p for p in samples if p[0] >= 0.2 * seconds]
    result["rss_slope_mib_per_min"] = least_squares_mib_per_min(tail)
    result["rss_growth_after_warmup_mib"] = (tail[-1][1] - tail[0][1]) if tail else None
    result["py_blocks_k_per_min"] = least_squares_mib_per_min([p for p in blocks if p[0] >= 0.2 * seconds])
    late = [p for p in procs if p[0] >= 0.2 * seconds]
    result["rss_anon_slope_mib_per_min"] = least_squares_mib_per_min([(p[0], p[2]) for p in late])
    if procs:
        result["threads_first_last_max"] = [procs[0][1], procs[-1][1], max(p[1] for p in procs)]
        result["mappings_first_last_max"] = [procs[0][3], procs[-1][3], max(p[3] for p in procs)]
    if censuses:
        result["census_growth"] = result_census  # from 20 % of the run to its end; "*" = all tracked objects
    if session is not None:
        # a log entry is a detach/attach cycle only if the on-phase paused (cycle_s > 0)
        on_t = [d[0] for d in session.duty_log if d[5] > 0 and d[0] - wall0 >= 0.2 * seconds]
        result["cycles"] = sum(1 for d in session.duty_log if d[5] > 0)

        result["trim"] = trim
        result["duty_pinned"] = duty
        if len(on_t) >= 2:
            per_min = 60.0 * (len(on_t) - 1) / (on_t[-1] - on_t[0])
            result["cycles_per_min_after_warmup"] = per_min
            result["rss_mib_per_cycle"] = result["rss_slope_mib_per_min"] / per_min
            # robust, over the second half (after the first window's shard write for runs >= 2 windows)
            half = [p for p in samples if p[0] >= 0.5 * seconds]
            result["rss_theil_sen_second_half_mib_per_min"] = theil_sen_mib_per_min(half)
            result["rss_mib_per_cycle_robust"] = result["rss_theil_sen_second_half_mib_per_min"] / per_min
        result["records"] = session.agg.records_total
        result["max_open_signatures"] = max(sigs) if sigs else None
        result["controller_duty_at_end"] = session.controller.duty
        import collector

        collector.stop()
        result["dropped"] = session.dropped_total
        # buffers the binding allocated for CUPTI against those CUPTI handed back, after the exit detach
        # (a gap is memory never freed)
        result["buffers_requested_completed"] = [session.tracer.buffers_requested, session.tracer.buffers_completed]
        result["buffers_outstanding_max"] = session.tracer.buffers_outstanding_max  # most host buffers CUPTI held at once
        result["records_delivered"] = session.agg.delivered_total
        result["invalid_zero_timestamp"] = session.agg.invalid_zero_ts
        result["drain"] = session.tracer.drain.summary()  # collector.drain; read after stop() like the counts above
        # collector.finalize: where each cuptiFinalize ran, the exit detach included (read after stop())
        result["finalize"] = session.tracer.finalizer.summary()
        # the traced fraction actually used: time-weighted sampling_duty of the health rows
        from cudawatch.shards import list_shards, read_shard

        health = [r for f in list_shards(root, "health") for r in read_shard(f).to_pylist()]
        result["sampling_duty_mean"] = (sum(r["sampling_duty"] * r["window_s"] for r in health) /
                                        sum(r["window_s"] for r in health)) if health else None
        result["data_quality"] = sorted({r["data_quality"] for r in health if r.get("data_quality")})
        shards = [p for p in root.rglob("*.parquet") if ".spool" not in p.parts]
        result["shards"] = len(shards)
        result["shard_bytes_written"] = sum(p.stat().st_size for p in shards)
        result["day_volume"] = day_volume(root, Path(tempfile.mkdtemp(prefix="cw-day-")))
    return result


def cycles(n: int) -> list[dict]:
    """RSS retained by ``n`` CUPTI attach/detach cycles, for three buffer splits (one process)."""
    import ctypes

    import torch

    from collector.aggregate import Aggregator
    from collector.budget import BufferBudget
    from collector.tracer import CuptiTracer

    x = torch.zeros(16, device="cuda")
    out = []
    for host_mib, dev_mib in ((1, 4), (8, 1), (8, 4)):
        b = BufferBudget()
        b.host_buffer, b.device_buffer = host_mib << 20, dev_mib << 20
        t = CuptiTracer(Aggregator(60), b)
        r0 = gpu_workloads.rss_mib()
        for _ in range(n):
            t.attach()
            for _ in range(2000):
                x.add_(1)
            torch.cuda.synchronize()
            t.detach()
        r1 = gpu_workloads.rss_mib()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out.append({"host_buffer_mib": host_mib, "device_buffer_mib": dev_mib, "cycles": n,
                    "rss_growth_mib": r1 - r0, "after_malloc_trim_mib": gpu_workloads.rss_mib() - r0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--seconds", type=float, default=20)
    m = sub.add_parser("measure")
    m.add_argument("--seconds", type=float, default=150)
    m.add_argument("--no-collector", action="store_true")
    m.add_argument("--no-trim", action="store_true", help="no malloc_trim after each detach")
    m.add_argument("--duty", type=float, help="pin the traced fraction (benchmark only), so every period cycles")
    m.add_argument("--census", action="store_true", help="count tracked objects by type at 20 %% and at the end")
    m.add_argument("--json")
    m.add_argument("--workload", choices=("cnn", "launch"), default="cnn", help="the CNN loop or the launch-bound loop")
    c = sub.add_parser("cycles")
    c.add_argument("--cycles", type=int, default=60)
    a = ap.parse_args()
    if a.cmd == "cycles":
        print(json.dumps(cycles(a.cycles), indent=1))
        return
    if a.cmd == "train":
        print(f"steps {train(a.seconds, log_every=200)}")
        return
    res = measure(a.seconds, not a.no_collector, trim=not a.no_trim, duty=a.duty, census=a.census, workload=a.workload)
    print(json.dumps({k: v for k, v in res.items() if k != "rss_samples"}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
