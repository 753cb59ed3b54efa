"""Benchmark: wall time of ``simulate_fleet`` for the demo fleet and a 1,024-GPU day.

Usage: ``.venv/bin/python benchmarks/simulate.py [--sizes 16x48,1024x24] [--out DIR] [--keep]``.
Prints one line per size: GPUs, hours, wall and CPU seconds, the 1-minute load average at the end
(the machine may be shared), shards, bytes on disk, rows/s and rows per table.
Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from simulator import simulate_fleet

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(gpus: int, hours: int, out: Path, seed: int = 7) -> dict:
    if out.exists():
        shutil.rmtree(out)
    t0, c0 = time.perf_counter(), time.process_time()
    truth = simulate_fleet(out, gpus=gpus, hours=hours, seed=seed, start=START)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = sum(truth.rows.values())
    return {"gpus": gpus, "hours": hours, "seconds": seconds, "cpu_s": cpu, "shards": truth.shards, "rows": truth.rows,
            "bytes": _du(out), "rows_per_s": rows / seconds, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16x48,1024x24", help="comma-separated GPUSxHOURS")
    ap.add_argument("--out", type=Path, default=None, help="folder for the shards (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the shards")
    args = ap.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="cw-sim-bench-"))
    print(f"# {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    try:
        for size in args.sizes.split(","):
            gpus, hours = (int(x) for x in size.lower().split("x"))
            r = run(gpus, hours, base / f"{gpus}x{hours}")
            rows = ", ".join(f"{k}={v:,}" for k, v in r["rows"].items())
            print(f"{gpus} GPUs x {hours} h: {r['seconds']:.1f} s wall, {r['cpu_s']:.1f} s CPU (all threads), "
                  f"load average {r['load']:.1f}, {r['shards']:,} shards, {r['bytes'] / 1e6:.1f} MB, "
                  f"{r['rows_per_s']:,.0f} rows/s ({rows})", flush=True)
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
