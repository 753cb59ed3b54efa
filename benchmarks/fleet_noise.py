"""False alarms of the hourly sequential path on the *fleet simulator's* hourly noise.

The thresholds (analytics.sequential.DEFAULT_THRESHOLDS) were calibrated on the benchmark corpus
(simulator/corpus.py: t(4) AR(1) innovations, random-walk drift with hourly step U(0, 0.05 %)),
while the fleet simulator (simulator/noise.py ``hourly_log_noise``, what the demo and the
end-to-end tests run) draws Gaussian AR(1) noise with a random-walk drift of 0.15 % per hour and
2 % outlier hours. This replays 7 days of hourly runs of ``analytics.online`` (the product's path,
through benchmarks/detection_rows.product_stats) on clean series of the fleet noise, with the
drift and outlier rate varied, and prints false alerts per 1,000 series-days (one alert per
event, as benchmarks/detection.py counts them). docs/detection.md quotes the result.

    .venv/bin/python benchmarks/fleet_noise.py --series 1000
    .venv/bin/python benchmarks/fleet_noise.py --recall --series 600   # steps of 3, 4, 6 sigma, with and without drift
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import sequential as sq  # noqa: E402
from benchmarks import detection_rows as rows  # noqa: E402
from simulator.noise import hourly_log_noise  # noqa: E402

CASES = ((0.0015, 0.02, "fleet simulator (drift 0.15 %/h, outliers 2 %)"), (0.0010, 0.02, "drift 0.10 %/h"),
         (0.0005, 0.02, "drift 0.05 %/h"), (0.0, 0.02, "no drift"), (0.0015, 0.0, "drift 0.15 %/h, no outliers"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--history", type=int, default=264, help="hours before the first hourly run")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--recall", action="store_true", help="recall of one step per series instead (seed 9 unless --seed)")
    args = ap.parse_args(argv)
    if args.recall:
        return recall(args.series, args.history, args.days, 9 if args.seed == 5 else args.seed)
    n, hist, days = args.series, args.history, args.days
    print("| fleet noise | alerts | per 1,000 series-days |\n|---|---|---|")
    for drift, outliers, label in CASES:
        rng = np.random.default_rng(args.seed)
        sigma = rng.choice([0.008, 0.010, 0.012], n)  # the simulator's hourly sigma of most kernel classes
        values = 1e5 * np.exp(hourly_log_noise(rng, n, hist + 24 * days, sigma, drift_sigma=drift, outlier_p=outliers))
        t0 = time.perf_counter()
        alerts = rows.alerts_from_stats(*rows.product_stats(values, hist), sq.DEFAULT_THRESHOLDS)
        fp = sum(len(a) for a in alerts)
        print(f"| {label} | {fp} | {1000 * fp / (n * days):.2f} |", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print(f"\n({n} clean series, {hist} h of history, {days} days of hourly runs, DEFAULT_THRESHOLDS)")
    return 0


def recall(n: int, hist: int, days: int, seed: int) -> int:
    """Recall within 3 / 6 / 12 hourly runs of one step of k = 3, 4 or 6 stationary sigma per series
    (onset uniform in the runs' week, matched within +-3 h), on fleet noise without and with the
    simulator's 0.15 %/h drift, at DEFAULT_THRESHOLDS."""
    print("| drift | k = 3 | k = 4 | k = 6 |\n|---|---|---|---|")
    for drift in (0.0, 0.0015):
        rng = np.random.default_rng(seed)
        sigma = rng.choice([0.008, 0.010, 0.012], n)
        x = hourly_log_noise(rng, n, hist + 24 * days, sigma, drift_sigma=drift, outlier_p=0.02)
        k = np.repeat([3.0, 4.0, 6.0], -(-n // 3))[:n]
        onset = rng.integers(hist + 12, hist + 24 * days - 13, n)
        x += np.where(np.arange(x.shape[1])[None, :] >= onset[:, None], (k * sigma)[:, None], 0.0)
        alerts = rows.alerts_from_stats(*rows.product_stats(1e5 * np.exp(x), hist), sq.DEFAULT_THRESHOLDS)
        ttd = np.array([min([r - onset[i] + 1 for o, r in a if abs(o - onset[i]) <= 3], default=np.inf)
                        for i, a in enumerate(alerts)])
        cells = [" / ".join(f"{(ttd[k == kk] <= w).mean():.2f}" for w in (3, 6, 12)) for kk in (3.0, 4.0, 6.0)]
        print(f"| {100 * drift:.2f} %/h | " + " | ".join(cells) + " |", flush=True)
    print(f"\n({n} series, seed {seed}, {hist} h of history, {days} days of hourly runs, DEFAULT_THRESHOLDS; "
          "found within 3 / 6 / 12 runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
