"""Cost of ``cudawatch calibrate`` (analytics.fleet_calibration): load a warehouse's history and
replay the hourly path over it, per series-run, on clean corpus series loaded as kernels.

    .venv/bin/python benchmarks/fleet_calibration_cost.py [--series 300] [--days 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import fleet_calibration as fc  # noqa: E402
from analytics import online  # noqa: E402
from analytics.detect import DetectConfig  # noqa: E402
from analytics.store import connect  # noqa: E402
from analytics.store.schema import refresh_hourly  # noqa: E402
from simulator.corpus import kernel_rows, make_corpus  # noqa: E402

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=300)
    ap.add_argument("--days", type=int, default=2)
    a = ap.parse_args(argv)
    cfg = DetectConfig(series=("kernel_mean_ns",))
    hours = online.lookback_hours(cfg.seq) + 24 * a.days
    n = a.series
    values = make_corpus(n, hours=hours, seed=90, step_fraction=0.0, improvement_fraction=0.0).values
    con = connect(Path(tempfile.mkdtemp()) / "w.duckdb")
    ts = [T0 + dt.timedelta(hours=h) for h in range(hours)]
    con.register("tbl", kernel_rows(values, T0))
    con.execute("INSERT INTO kernels BY NAME SELECT * FROM tbl")
    con.unregister("tbl")
    refresh_hourly(con, "kernels", ts[0], ts[-1])
    t0 = time.perf_counter()
    hist = fc.load_history(con, ts[-1], days=a.days, config=cfg)
    t1 = time.perf_counter()
    c = fc.calibrate_history(hist, target=0.75, min_series_days=1)
    t2 = time.perf_counter()
    runs = c.series_days * 24
    print(f"| series | runs each | load | replay + calibrate | per series-run | 100,000 series x 14 days (extrapolated) |\n"
          f"|---|---|---|---|---|---|\n"
          f"| {n} | {24 * a.days} | {t1 - t0:.2f} s | {t2 - t1:.1f} s | {1e6 * (t2 - t1) / runs:.0f} µs | "
          f"{(t2 - t1) / runs * 100_000 * 336 / 3600:.1f} h |")
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
