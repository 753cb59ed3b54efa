"""The vanished-kernel rule (``analytics.presence``) under Laplace's and Jeffreys' estimate of a
kernel's absence rate: false alarms on kernels that are absent at random, and the delay on a kernel
that vanishes on a young fleet.

Each series is a kernel's 0/1 presence per hour (present in hour 0, then absent in each hour with
probability q, independently: the null the rule is built for). ``presence.vanished`` runs on the
hours up to each hourly run, as ``analytics.lifecycle.find_absence`` calls it; an alarm is a run
whose answer turns from None to a step (one per absent run). Runs from hour 24 (the rule's
``min_points``) to the series' last hour.

- false alarms per 1,000 series-days, per q and series length (48 h: a fleet's first two days;
  96 h);
- delay: an always-present kernel (or one absent in 5 % of hours) that vanishes at hour ``onset``;
  hours from the onset to the run that reports it (0 = the run at the onset's hour).

    .venv/bin/python benchmarks/presence_prior.py --reps 20000      # ~3 min on the 2-core VM
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

from analytics import presence  # noqa: E402

PRIORS = {"Laplace (1, product)": 1.0, "Jeffreys (0.5)": 0.5}
FIRST_RUN = 24


def alarms(x: np.ndarray, prior: float) -> list[int]:
    """Hours whose run first reports each absent run of ``x``."""
    out, prev = [], None
    for t in range(FIRST_RUN, x.size):
        hit = presence.vanished(x[: t + 1], prior=prior)
        if hit is not None and prev is None:
            out.append(t)
        prev = hit
    return out


def false_rate(q: float, hours: int, reps: int, prior: float, seed: int) -> tuple[int, float]:
    """(alarms, series-days) over ``reps`` series absent at random with rate q."""
    rng = np.random.default_rng((seed, int(q * 1000), hours))
    n = 0
    for _ in range(reps):
        x = (rng.random(hours) >= q).astype(float)
        x[0] = 1.0
        n += len(alarms(x, prior))
    return n, reps * (hours - FIRST_RUN) / 24


def delay(q: float, onset: int, reps: int, prior: float, seed: int) -> np.ndarray:
    """Hours from ``onset`` to the first alarm at or after it (NaN: not within 12 h), per series."""
    rng = np.random.default_rng((seed, int(q * 1000), onset, 1))
    out = np.full(reps, np.nan)
    for r in range(reps):
        x = (rng.random(onset + 12) >= q).astype(float)
        x[0], x[onset:] = 1.0, 0.0
        after = [t for t in alarms(x, prior) if t >= onset]
        if after:
            out[r] = after[0] - onset
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20000, help="series per (q, length, prior)")
    ap.add_argument("--qs", default="0.01,0.02,0.05,0.1,0.2,0.3")
    ap.add_argument("--hours", default="48,96")
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    qs = [float(v) for v in args.qs.split(",")]
    lengths = [int(v) for v in args.hours.split(",")]
    print(f"# The vanished-kernel rule: Laplace's against Jeffreys' absence rate\n\nmachine: {platform.platform()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n"
          f"command: `.venv/bin/python benchmarks/presence_prior.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(f"False alarms per 1,000 series-days (count), kernels absent at random ({args.reps:,} series a cell):\n")
    print("| prior | " + " | ".join(f"{h} h, q={q:g}" for h in lengths for q in qs) + " | pooled |")
    print("|---|" + "---|" * (len(lengths) * len(qs) + 1))
    for name, prior in PRIORS.items():
        cells, tot_n, tot_d = [], 0, 0.0
        for h in lengths:
            for q in qs:
                n, days = false_rate(q, h, args.reps, prior, args.seed)
                tot_n, tot_d = tot_n + n, tot_d + days
                cells.append(f"{1000 * n / days:.2f} ({n})")
        print(f"| {name} | " + " | ".join(cells) + f" | {1000 * tot_n / tot_d:.2f} ({tot_n}) |")
    print("\nDelay (hours after the onset; 0 = the onset's own run) of a kernel that vanishes, "
          f"{max(args.reps // 10, 100):,} series a cell: median, share within 3 runs (delay <= 2):\n")
    cases = [(0.0, 32), (0.0, 80), (0.05, 32), (0.05, 80)]
    print("| prior | " + " | ".join(f"q={q:g}, onset {o}" for q, o in cases) + " |\n|---|" + "---|" * len(cases))
    for name, prior in PRIORS.items():
        cells = []
        for q, o in cases:
            d = delay(q, o, max(args.reps // 10, 100), prior, args.seed)
            cells.append(f"{np.nanmedian(d):.0f}, {np.mean(d <= 2):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
