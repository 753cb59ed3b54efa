"""Does the collector's window path (aggregate → rows → spool → hourly shard) keep native memory?

The 15-minute soaks grow ~0.65-1.05 MiB a minute after their first minutes (docs/benchmarks.md
§9, §14). ``tests/collector/test_retention.py`` shows with ``tracemalloc`` that this path keeps no
*Python* memory per window, but tracemalloc does not see pyarrow's native allocations (its memory
pool, Parquet writers and readers). This script runs the product's own path in process, on one
thread, with real H200 records (``tests/data/cupti/records.jsonl.gz``) shifted to one window after
another through one long-lived aggregator. Once a 30-s control period it runs the session's own close-and-rotate step
(``Spool.close_and_rotate``): a window is closed 61 s after it ends, an hour's shards are
written once its last window is closed. After each hour's shards it samples the process RSS
(``/proc/self/statm``) and pyarrow's allocated bytes. Not exercised: records arriving on CUPTI's
thread while windows are written on the collector's (per-thread allocator arenas), the per-period
health notes, the ``.status`` file. No GPU needed: run it on the GPU host's Python too.

    python benchmarks/spool_rss.py --windows 1440 --json spool_rss.json     # a day of 60-s windows

Reports the RSS before the first window write, after it and after the first hour's shards (the
one-off steps: on the GPU hosts the soaks' RSS stepped +40-60 MiB at their first writes,
docs/benchmarks.md §23; ``ARROW_DEFAULT_MEMORY_POOL`` and ``OMP_NUM_THREADS`` change pyarrow's
allocator and thread pool), the RSS after each hour's shards and its least-squares slope after the first quarter, in
MiB per 1,000 windows (a soak's tail of 1 MiB a minute would be ~1,000 MiB per 1,000 windows if it
came from here).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.gpu_workloads import rss_mib  # noqa: E402
from benchmarks.step_log import least_squares_slope  # noqa: E402
from collector.aggregate import Aggregator  # noqa: E402
from collector.replay import load_records  # noqa: E402
from collector.rows import ProcessMeta  # noqa: E402
from collector.spool import Spool  # noqa: E402

RECORDS = Path(__file__).resolve().parents[1] / "tests" / "data" / "cupti" / "records.jsonl.gz"
EPOCH_S = 1_699_999_200  # first window start, on a whole hour (2023-11-14 22:00 UTC)
PERIOD_S = 30  # the control period at the default 2 % budget


def slope_per_1000(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of RSS (MiB) against windows, per 1,000 windows, after the first quarter."""
    tail = points[len(points) // 4:]
    return 1000.0 * least_squares_slope(tail) if len(tail) >= 3 else None


def run(windows: int, window_s: int, kernels_per_window: int, root: str) -> dict:
    if 3600 % window_s or window_s % PERIOD_S:
        raise SystemExit(f"--window-s must divide an hour and be a multiple of {PERIOD_S} s, got {window_s}")
    if windows < 1 or kernels_per_window < 1:
        raise SystemExit("--windows and --kernels must be at least 1")
    kernels, copies = load_records(RECORDS)
    kernels, copies = kernels[:kernels_per_window], copies[: max(1, kernels_per_window // 10)]
    t0 = min(min(k[0] for k in kernels), min(c[0] for c in copies))  # every record inside its window
    spool = Spool(root, ProcessMeta(host="h", job="j", run_id="r", pid=1), window_s=window_s)
    agg = Aggregator(window_s=window_s)  # one for the whole run, as in a collector session
    points: list[tuple[int, float]] = []  # (windows fed, RSS) after each hour's shards
    first: dict[str, float] = {}  # the one-off steps of the first writes (a GPU soak: +40-60 MiB)
    shards_at: list[int] = []  # shards written so far, at the same moments
    arrow_bytes: list[int] = []
    for i in range(windows):
        shift = (EPOCH_S + i * window_s) * 1_000_000_000 - t0
        agg.add_kernels([(s + shift, e + shift, sig) for s, e, sig in kernels])
        agg.add_copies([(c[0] + shift, c[1] + shift, *c[2:]) for c in copies])
        for k in range(1, window_s // PERIOD_S + 1):  # the session's close-and-rotate step, once a period
            shards = spool.shards_total
            if "after_first_window" not in first:  # until a window is written: the RSS just before the step
                gc.collect()
                first["before_first_write"] = rss_mib()
            closed = spool.close_and_rotate(agg, EPOCH_S + i * window_s + k * PERIOD_S + 1, PERIOD_S)
            if closed and "after_first_window" not in first:
                gc.collect()
                first["after_first_window"] = rss_mib()
            if spool.shards_total > shards:  # an hour's shards, once its last window is closed
                gc.collect()
                points.append((i + 1, rss_mib()))
                first.setdefault("after_first_hour", points[-1][1])
                shards_at.append(spool.shards_total)
                arrow_bytes.append(pa.total_allocated_bytes())
    spool.add_windows(agg.take_all())
    spool.rotate(final=True)
    return {"python": platform.python_version(), "pyarrow": pa.__version__, "memory_pool": pa.default_memory_pool().backend_name,
            "windows": windows, "window_s": window_s, "kernels_per_window": len(kernels), "copies_per_window": len(copies),
            "cpu_count": pa.cpu_count(), "rss_mib_first_writes": first,
            "shards_written": spool.shards_total, "shards_at_rotations": shards_at, "rss_mib_at_rotations": points, "arrow_allocated_bytes": arrow_bytes,
            "rss_slope_mib_per_1000_windows": slope_per_1000(points)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=1440)
    ap.add_argument("--window-s", type=int, default=60)
    ap.add_argument("--kernels", type=int, default=3000, help="kernel records per window, at most the file's 3,973 (copies: a tenth, at most its 27)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        res = run(a.windows, a.window_s, a.kernels, root)
    pts = res["rss_mib_at_rotations"]
    print(f"python {res['python']}, pyarrow {res['pyarrow']} ({res['memory_pool']}): {res['windows']} windows of "
          f"{res['kernels_per_window']} kernels, {res['shards_written']} shards; RSS {pts[0][1]:.1f} → {pts[-1][1]:.1f} MiB"
          if pts else "fewer windows than an hour: no rotation sampled")
    f = res["rss_mib_first_writes"]
    print(f"first writes (arrow pool {res['memory_pool']}, {res['cpu_count']} threads): RSS {f['before_first_write']:.1f} → "
          f"{f.get('after_first_window', float('nan')):.1f} after the first window → {f.get('after_first_hour', float('nan')):.1f} "
          "after the first hour's shards")
    slope = res["rss_slope_mib_per_1000_windows"]
    print(f"slope after the first quarter: {slope:+.2f} MiB per 1,000 windows" if slope is not None
          else "slope: needs at least 3 hourly rotations after the first quarter of them")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
