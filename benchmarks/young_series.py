"""Young series on the sequential path: thresholds for rows with less than a week of fit history,
their false-alarm rate on a check seed, and their recall against the change points on the same
step series.

``analytics.online.fit_day`` tests a *young* row (``YOUNG_HISTORY_HOURS`` to ``MIN_HISTORY_HOURS``
valid hours in its fit history) with a model fitted on the hours it has; such a model is noisier
than a two-week fit, so its statistic needs thresholds of its own (``young.YOUNG_THRESHOLDS``).
This script sets them the way the shipped mature thresholds were set: the product's hourly replay
(``fleet_calibration.replay_stats`` with ``young_history``) on clean short-history corpus series
(benchmarks/changepoint_fa.py's ``short_history``: history U{48..167} h before the first run, 7
days of runs), counting only the runs where the row is young, then ``calibrate_stats`` for the
target with the product's window weights. Candidate thresholds for each ``--targets`` value are
calibrated on the fit seeds; the validation seeds choose the largest target that keeps ``--goal``
(calibration on a finite set under-counts the tail); the shipped thresholds are that target
calibrated on all dev seeds; the check seed only confirms them.

Recall: the step series of changepoint_fa.py (history 48-143 h at the first run, the step 24 h
later, runs to onset + 11), scored as benchmarks/detection.py's ``score``; in the same run the
change-point path that young rows took before (``changepoint_fa.replay`` at ``CP_BEFORE_PVALUE``, 5e-8,
only on the runs where it owned the row then) on the same series.

    PYTHONPATH=. .venv/bin/python benchmarks/young_series.py --clean-series 4500 --step-series 2400 --targets 0.9,0.7,0.5
    PYTHONPATH=. .venv/bin/python benchmarks/young_series.py --quick        # small sizes, ~1 min
    PYTHONPATH=. .venv/bin/python benchmarks/young_series.py --drift-check 600   # a drifting new fleet, ~1 min
    PYTHONPATH=. .venv/bin/python benchmarks/young_series.py --shipped-only 303,306   # the shipped thresholds only, ~7 min
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

from analytics import fleet_calibration as fc  # noqa: E402
from analytics import online  # noqa: E402
from analytics import sequential as sq  # noqa: E402
from analytics import young  # noqa: E402
from benchmarks import changepoint_fa as cf  # noqa: E402
from benchmarks import detection_rows as dr  # noqa: E402
from benchmarks.detection import K_SHOW, f2, score  # noqa: E402

CFG = sq.SequentialConfig()
#: The change points' significance when young rows still took them (``lifecycle.HOURLY_MAX_PVALUE``
#: until 2026-12-06; 1e-8 since): the comparison row replays that path as it was.
CP_BEFORE_PVALUE = 5e-8


def young_runs(values: np.ndarray, runs: np.ndarray, min_young: int) -> np.ndarray:
    """(series, runs) True where ``online.fit_day`` fits the row as young at that run: its valid
    hours in the day's fit history (``online.fit_prints``' first column) in [young, MIN_HISTORY_HOURS)."""
    out = np.zeros((values.shape[0], runs.size), bool)
    for j, t in enumerate(runs):
        have = online.fit_prints(values[:, : t + 1], t % 24, CFG)[:, 0]
        out[:, j] = (have >= min_young) & (have < online.MIN_HISTORY_HOURS)
    return out


def young_stats(corpus, first, last, min_young: int, model_hook=None):
    """The product's replay with young rows, kept only where the row is young and inside its runs."""
    values = corpus.values
    runs, S, V, Z = fc.replay_stats(values[:, : int(last.max()) + 1], int(first.min()), CFG, young_history=min_young,
                                    model_hook=model_hook)
    keep = young_runs(values, runs, min_young) & (runs >= first[:, None]) & (runs <= last[:, None])
    return runs, np.where(keep[..., None], S, -np.inf), V, Z


def series_days(S: np.ndarray) -> float:
    return float(np.isfinite(S).any(axis=-1).sum()) / 24


def pooled(parts):
    runs = parts[0][0]
    return (runs, *(np.concatenate([p[i] for p in parts]) for i in (1, 2, 3)))


def rate_at(stats, h) -> tuple[int, float]:
    runs, S, V, Z = stats
    n = sum(map(len, dr.alerts_from_stats(runs, S, V, Z, h)))
    return n, 1000 * n / max(series_days(S), 1e-9)


def drift_check(n: int, min_young: int, seed: int = 3) -> str:
    """False alarms of young rows at the shipped thresholds on a new fleet whose levels drift (the
    fleet simulator's noise, ``simulator.noise.hourly_log_noise``: 0.15 %/h walk, 2 % outlier hours,
    sigma 0.8-1.2 %, 168 h, runs from hour 60, every row young): the product's drift (no mature rows:
    ``young.lag_drift_q2``) against no drift term and the true drift."""
    from dataclasses import replace
    from types import SimpleNamespace

    from simulator.noise import hourly_log_noise

    rng = np.random.default_rng(seed)
    out = ["| fleet drift | drift in the model | false alarms | per 1,000 young series-days |", "|---|---|---|---|"]
    for q in (0.0015, 0.0):
        v = 1e5 * np.exp(hourly_log_noise(rng, n, 168, rng.choice([0.008, 0.010, 0.012], n), drift_sigma=q, outlier_p=0.02))
        first, last = np.full(n, 60), np.full(n, 167)
        for name, d in (("estimated (product)", None), ("none", 0.0), ("true", q)):
            hook = None if d is None else (lambda rows, m, d=d: replace(m, drift=np.full(rows.size, d)))
            st = young_stats(SimpleNamespace(values=v), first, last, min_young, model_hook=hook)
            k, r = rate_at(st, young.YOUNG_THRESHOLDS)
            out.append(f"| {100 * q:.2f} %/h | {name} | {k} | {r:.2f} |")
    return "\n".join(out)


def shipped_only(seeds: list[int], a) -> str:
    """False alarms per 1,000 young series-days at ``young.YOUNG_THRESHOLDS`` on each clean seed
    (2 x ``--clean-series`` series, as the check seed), and recall on the step seed."""
    h = young.YOUNG_THRESHOLDS
    out = [f"thresholds {young.YOUNG_THRESHOLDS_VERSION}, model {online.MODEL_VERSION}",
           "| seed | false alarms | young series-days | per 1,000 |", "|---|---|---|---|"]
    for seed in seeds:
        st = young_stats(*cf.short_history(2 * a.clean_series, seed, steps=False), a.young)
        n, r = rate_at(st, h)
        out.append(f"| {seed} | {n} | {series_days(st[1]):,.0f} | {r:.2f} |")
    steps, first, last = cf.short_history(a.step_series, a.step_seed, steps=True)
    rec = score(dr.alerts_from_stats(*young_stats(steps, first, last, a.young), h), [], steps, 1)["k"]
    out.append(f"\nrecall within 3 / 6 / 12 runs, step seed {a.step_seed}: " + "; ".join(
        f"k={k:g} {f2(rec[k]['r3'])} / {f2(rec[k]['r6'])} / {f2(rec[k]['r12'])}" for k in K_SHOW if k in rec))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--young", type=int, default=young.YOUNG_HISTORY_HOURS or 24, help="fewest fit-history hours of a young row")
    ap.add_argument("--fit-seeds", default="301,302", help="dev seeds the candidate thresholds are calibrated on")
    ap.add_argument("--val-seeds", default="304,305", help="dev seeds that choose the target")
    ap.add_argument("--check-seed", type=int, default=303, help="seed that only confirms the final thresholds")
    ap.add_argument("--step-seed", type=int, default=312)
    ap.add_argument("--clean-series", type=int, default=4500, help="clean series per dev seed (the check seed: twice that)")
    ap.add_argument("--step-series", type=int, default=2400)
    ap.add_argument("--targets", default="0.9,0.7,0.5", help="calibration targets tried (false per 1,000 young series-days)")
    ap.add_argument("--goal", type=float, default=0.9, help="the validation seeds' rate the chosen target must keep")
    ap.add_argument("--no-cp", action="store_true", help="skip the change-point comparison")
    ap.add_argument("--drift-check", type=int, default=0, metavar="N",
                    help="only the drifting new fleet of N series at the shipped thresholds (``drift_check``)")
    ap.add_argument("--shipped-only", default="", metavar="SEEDS",
                    help="only the shipped thresholds: false alarms on 2 x --clean-series series of each of these "
                         "seeds and recall on --step-seed (no calibration)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.drift_check:
        print(drift_check(a.drift_check, a.young))
        return 0
    if a.quick:
        a.clean_series, a.step_series = 300, 300
    if a.shipped_only:
        print(shipped_only([int(x) for x in a.shipped_only.split(",")], a))
        return 0
    t0 = time.perf_counter()
    clean = {int(s): young_stats(*cf.short_history(a.clean_series, int(s), steps=False), a.young)
             for s in (a.fit_seeds + "," + a.val_seeds).split(",")}
    fit = pooled([clean[int(s)] for s in a.fit_seeds.split(",")])
    val = pooled([clean[int(s)] for s in a.val_seeds.split(",")])
    every = pooled(list(clean.values()))
    trials = []
    for target in (float(x) for x in a.targets.split(",")):
        h, _, r = fc.calibrate_stats(*fit, target, CFG)
        trials.append((target, r, *rate_at(val, h)))
    ok = [t for t in trials if t[3] <= a.goal]
    chosen = max(ok)[0] if ok else min(trials)[0]
    h, p, rate = fc.calibrate_stats(*every, chosen, CFG)
    check = young_stats(*cf.short_history(2 * a.clean_series, a.check_seed, steps=False), a.young)
    n_check, r_check = rate_at(check, h)
    steps, first, last = cf.short_history(a.step_series, a.step_seed, steps=True)
    ys = young_stats(steps, first, last, a.young)
    rec = score(dr.alerts_from_stats(*ys, h), [], steps, 1)["k"]
    tested = int(np.isfinite(ys[1]).any(axis=(1, 2)).sum())
    cp = None
    if not a.no_cp:
        tables, _ = cf.replay(steps.values, first, last, [CP_BEFORE_PVALUE], young_history=None)
        cp = score(tables[CP_BEFORE_PVALUE].alerts(), [], steps, 1)["k"]
    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"# Young series on the sequential path\n\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; wall "
          f"{time.perf_counter() - t0:.0f} s\ncommand: `PYTHONPATH=. .venv/bin/python benchmarks/young_series.py {cmd}`\n")
    print(f"young rows: {a.young} to {online.MIN_HISTORY_HOURS - 1} valid hours in the fit history; mature thresholds "
          f"(sq.DEFAULT_THRESHOLDS) on the young runs of all dev seeds: {rate_at(every, sq.DEFAULT_THRESHOLDS)[1]:.2f} per 1,000\n")
    print(f"| target | rate on fit seeds {a.fit_seeds} ({series_days(fit[1]):,.0f} series-days) | "
          f"validation seeds {a.val_seeds} ({series_days(val[1]):,.0f} series-days) |\n|---|---|---|")
    for target, r, n, rv in trials:
        print(f"| {target:g} | {r:.2f} | {rv:.2f} ({n}) |")
    print(f"\nchosen target {chosen:g} (largest with validation <= {a.goal:g}); thresholds on all dev seeds "
          f"({series_days(every[1]):,.0f} series-days; rate there {rate:.2f}, tail p {p:.3g}):\n"
          f"    ({', '.join('np.inf' if not np.isfinite(x) else f'{x:.2f}' for x in h)})")
    print(f"check seed {a.check_seed}: {n_check} false alarms on {series_days(check[1]):,.0f} young series-days = "
          f"{r_check:.2f} per 1,000; the shipped thresholds ({young.YOUNG_THRESHOLDS_VERSION}) there: "
          "{:.2f} ({}), on all dev seeds: {:.2f} ({})\n".format(*rate_at(check, young.YOUNG_THRESHOLDS)[::-1],
                                                               *rate_at(every, young.YOUNG_THRESHOLDS)[::-1]))
    print(f"Recall within 3 / 6 / 12 hourly runs, onset ±3 h ({a.step_series} step series of seed {a.step_seed}, "
          f"{tested} tested as young; n per k):\n")
    print("| path | " + " | ".join(f"k={k:g}" for k in K_SHOW) + " |\n|---|" + "---|" * len(K_SHOW))
    rows = [("young rows, sequential", rec)] + ([(f"change points at {CP_BEFORE_PVALUE:g} (before)", cp)] if cp else [])
    for name, r in rows:
        print(f"| {name} | " + " | ".join(f"{f2(r[k]['r3'])} / {f2(r[k]['r6'])} / {f2(r[k]['r12'])} ({r[k]['n']})"
                                          if k in r else "–" for k in K_SHOW) + " |")
    on1 = [rec[k]["onset1"] for k in K_SHOW if k in rec and k >= 3]
    print("\nonset within ±1 h of found steps, k >= 3 (young): " + ", ".join(f2(x) for x in on1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
