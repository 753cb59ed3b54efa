"""Calibration size and target of the sequential detector, on development seeds only.

The hourly path's statistics are replayed once on ``--cal-series`` clean series of seed 101
(``benchmarks.detection_rows.product_stats``, as ``benchmarks/detection.py --product-only`` does);
thresholds are then calibrated (``detection_rows.calibrate``) on the first N of them for every N
in ``--sizes`` and every target in ``--targets``, and each set of thresholds is measured on
development seeds: false alarms on ``--dev-clean-series`` clean series of ``--dev-clean-seed``
(default 202), recall on ``--dev-step-series`` step series of ``--dev-step-seed`` (default 201).
The held-out seeds of the detection benchmark (11 clean, 12 steps) are not touched: the chosen
setting is measured on them once with ``benchmarks/detection.py --product-only --cal-series N
--target T``, which calibrates on the same series (the first N of seed 101 when N == --cal-series).

    .venv/bin/python benchmarks/calibration_size.py --cal-series 36000 --sizes 12000,24000,36000 \\
        --targets 0.75,0.85,0.9,1.0

Prints Markdown: per (size, target) the in-sample rate, the development false-alarm rate, precision
and recall cells, and the thresholds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import sequential as sq  # noqa: E402
from benchmarks import detection as det  # noqa: E402
from benchmarks import detection_rows as rows  # noqa: E402


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cal-series", type=int, default=36000, help="clean calibration series replayed (seed 101)")
    ap.add_argument("--sizes", default="12000,24000,36000", help="calibrate on the first N of them, for each N")
    ap.add_argument("--targets", default="0.75,0.85,0.9,1.0", help="false alarms per 1,000 series-days")
    ap.add_argument("--dev-clean-seed", type=int, default=202)
    ap.add_argument("--dev-clean-series", type=int, default=8000)
    ap.add_argument("--dev-step-seed", type=int, default=201)
    ap.add_argument("--dev-step-series", type=int, default=2400, help="0: no recall measurement")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in _floats(args.sizes) if x <= args.cal_series]
    cfg = sq.SequentialConfig()
    t_start = time.perf_counter()
    wall = {}

    t0 = time.perf_counter()
    cal = rows.product_stats(det.corpus(args.cal_series, 101, steps=False).values, det.HISTORY, cfg)
    wall["replay of the calibration series"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    dev_clean = rows.product_stats(det.corpus(args.dev_clean_series, args.dev_clean_seed, steps=False).values, det.HISTORY, cfg)
    wall["replay of the development clean series"] = time.perf_counter() - t0
    steps = dev_steps = None
    if args.dev_step_series:
        t0 = time.perf_counter()
        steps = det.corpus(args.dev_step_series, args.dev_step_seed, steps=True)
        dev_steps = rows.product_stats(steps.values, det.HISTORY, cfg)
        wall["replay of the development step series"] = time.perf_counter() - t0

    out = []
    t0 = time.perf_counter()
    for n in sizes:
        runs, S, V, Z = cal
        for target in _floats(args.targets):
            h, p, rate = rows.calibrate(runs, S[:n], V[:n], Z[:n], target, cfg)
            a_clean = rows.alerts_from_stats(*dev_clean, h, cfg)
            r = None
            if steps is not None:
                r = det.score(rows.alerts_from_stats(*dev_steps, h, cfg), a_clean, steps, args.dev_clean_series)
            fp = sum(len(a) for a in a_clean)
            out.append((n, target, rate, p, fp, 1000.0 * fp / (args.dev_clean_series * det.DAYS), r, h))
    wall["calibrations and scoring"] = time.perf_counter() - t0

    print(f"# Calibration size and target (development seeds)\n\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"wall {time.perf_counter() - t_start:.0f} s ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in wall.items()) + ")\n"
          f"command: `.venv/bin/python benchmarks/calibration_size.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
          f"calibration: first N of {args.cal_series} clean series of seed 101; development: {args.dev_clean_series} clean "
          f"series of seed {args.dev_clean_seed} = {args.dev_clean_series * det.DAYS:,} series-days"
          + (f", {args.dev_step_series} step series of seed {args.dev_step_seed}" if steps is not None else "") + ".\n")
    print("| calibration series | target | in-sample rate (tail p) | dev false / 1,000 series-days (count) | dev / in-sample "
          "| precision | k=3σ within 3 / 6 / 12 | k=4σ within 3 | k=6σ within 3 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, target, rate, p, fp, fa, r, _ in out:
        kk = r["k"] if r else {}

        def c(k, w):
            return det.f2(kk.get(k, {}).get(w))

        print(f"| {n:,} | {target:g} | {rate:.2f} ({p:.1e}) | {fa:.2f} ({fp}) | {fa / rate if rate else float('nan'):.2f} | "
              f"{det.f2(r['precision']) if r else '–'} | {c(3.0, 'r3')} / {c(3.0, 'r6')} / {c(3.0, 'r12')} | "
              f"{c(4.0, 'r3')} | {c(6.0, 'r3')} |")
    print("\nthresholds (m = 3..12):\n")
    for n, target, *_, h in out:
        print(f"- {n:,} series, target {target:g}: " + ", ".join(f"{x:.2f}" for x in np.asarray(h)[cfg.min_len - 1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
