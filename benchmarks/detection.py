"""Detection benchmark: hourly detection of regression steps at a calibrated false-alarm rate,
with the statistical limit (oracle rows) beside cudawatch and the alternatives.

Every row runs the same hourly protocol on the same series (simulator/corpus.py, 16 days of
history, then 7 days of hourly runs, one run per hour) with the same 2 % minimum magnitude and the
same one-alert-per-event rule. Rows:

- clairvoyant t(4)-GLR: the GLR of analytics.sequential with the true noise model, outlier hours
  known and removed (an upper bound); robust oracle: outlier hours not known (the true mixture
  likelihood), but the realised level, daily cycle and random-walk path of every hour known;
  model-known oracle: the true noise model (AR, innovation and outlier laws, daily cycle,
  random-walk step) and nothing of its realisation — the level from the reference hours, the walk
  through the drift term, as a detector that knew the model exactly would have to;
- cudawatch hourly path: ``analytics.online.sequential_alarms`` / ``scan_stats``, the functions
  ``analytics.detect.detect_regressions`` runs on each family's loaded matrix (same window, same
  series selection, same daily model, same alarm rule);
- cudawatch detect_regressions on DuckDB: the whole hourly path hour by hour on a warehouse, with
  the thresholds calibrated above (fewer series: it loads every hour from SQL); and the previous
  hourly path (``DetectConfig(sequential=False)``: change points only);
- Otava and ruptures PELT on the trailing 168 h every run, and the design article's EWMA rule.

Thresholds of the GLR rows are calibrated (analytics.calibration) on separate clean seeds for
``--target`` false alarms per 1,000 series-days; false alarms are then measured on other clean
seeds (>= 30,000 series-days by default), recall on step seeds, all seeds unused for tuning. Each
GLR row is calibrated with the product's tail-probability weights per window length
(``analytics.fleet_calibration.WINDOW_WEIGHTS``) and again with equal weights (rows tagged so).

    .venv/bin/python benchmarks/detection.py                       # full size, ~33 min on 2 cores (2026-12-05 13:10, with the equal-weight rows;
                                                                   # the model-known oracle row came later: not timed in a full run)
    .venv/bin/python benchmarks/detection.py --quick               # small sizes, ~2 min
    .venv/bin/python benchmarks/detection.py --glr-only            # the oracle rows and cudawatch's only
    .venv/bin/python benchmarks/detection.py --glr-only --rows robust,model-known,cudawatch   # 2,093 s (2026-12-06)

A detection matches a step when its onset is within +-3 h; time to detection counts hourly runs
including the onset hour's (1 = the run that first saw the new level); "within 3 runs" = found
by the run of hour onset + 2. Prints Markdown (kept in docs/benchmarks.md).
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

from analytics import calibration as cal_module  # noqa: E402
from analytics import fleet_calibration  # noqa: E402
from analytics import online  # noqa: E402
from analytics import sequential as sq  # noqa: E402
from benchmarks import detection_rows as rows  # noqa: E402
from simulator.corpus import make_corpus  # noqa: E402

HISTORY = 384  # 16 days before the first hourly run
DAYS = 7
HOURS = HISTORY + 24 * DAYS
ONSETS = (HISTORY + 12, HOURS - 13)  # every step has 12 runs after it
MATCH_H = 3
K_SHOW = (1.0, 2.0, 3.0, 4.0, 6.0, 10.0)
CW = "**cudawatch hourly path** (analytics.online, as detect_regressions runs it)"
MODEL_ORACLE = "model-known oracle (noise model known, its realisation not: level from the reference, walk as drift)"
EQUAL = (1.0,)
EQUAL_TAG = ", equal weights per window length"


def corpus(n, seed, steps: bool):
    return make_corpus(n, hours=HOURS, seed=seed, step_fraction=1.0 if steps else 0.0,
                       improvement_fraction=0.0 if steps else 0.1, onset_range=ONSETS)


def score(alerts_steps, alerts_clean, steps, n_clean) -> dict:
    """Recall within 3/6/12 runs per k, onset error, precision, false alarms per 1,000 clean series-days."""
    scored = steps.regression & (steps.step_pct >= 2.0)
    ttd = np.full(len(alerts_steps), np.inf)
    err = np.full(len(alerts_steps), np.nan)
    tp = fp = 0
    for i, al in enumerate(alerts_steps):
        matched = seen = False
        for onset, run in al:
            near = abs(onset - steps.onset[i]) <= MATCH_H
            if seen and onset >= steps.onset[i]:
                continue  # the step persists: a later alert on it is that event (ongoing), not a new one
            if not scored[i] and onset >= steps.onset[i] - MATCH_H:
                seen = True
                continue  # an alert on a step below the floor is neither hit nor false
            seen = seen or onset >= steps.onset[i] - MATCH_H  # later alerts on this step are its event
            if near and not matched:
                matched, tp = True, tp + 1
                ttd[i], err[i] = run - steps.onset[i] + 1, onset - steps.onset[i]
            else:
                fp += 1
    fp_clean = sum(len(a) for a in alerts_clean)
    # precision at the fleet's mix: as many clean series as step series
    fp_mixed = fp + fp_clean * len(alerts_steps) / max(1, n_clean)
    out = {"fa": 1000.0 * fp_clean / max(1e-9, n_clean * DAYS), "fp_clean": fp_clean, "n_clean": n_clean,
           "precision": tp / (tp + fp_mixed) if tp + fp_mixed else float("nan"), "k": {}}
    for k in K_SHOW:
        m = scored & (steps.k == k)
        if m.any():
            hit = m & np.isfinite(ttd)
            out["k"][k] = {"n": int(m.sum()), "r3": float((ttd[m] <= 3).mean()), "r6": float((ttd[m] <= 6).mean()),
                           "r12": float((ttd[m] <= 12).mean()),
                           "onset1": float((np.abs(err[hit]) <= 1).mean()) if hit.any() else float("nan")}
    return out


def f2(x):
    return "–" if x is None or not np.isfinite(x) else f"{x:.2f}"


def speed(n: int, seed: int, thresholds, cfg=sq.SequentialConfig()) -> dict:
    """Cost of the hourly update for n series on the loaded matrix, as detect_regressions runs it:
    the day's first run fits the noise model (``online.day_model``) and stores it in the warehouse
    (``analytics.store.noise_models``); every run reads the day's model back and scans
    (``online.sequential_alarms`` with that model)."""
    import duckdb

    from analytics.store import noise_models as cache

    L = online.lookback_hours(cfg)
    c = make_corpus(n, hours=L, seed=seed, step_fraction=0.05, improvement_fraction=0.05, onset_range=(L - 24, L - 4))
    keys = [f"kernel_mean_ns|job{i}|k|kid|" for i in range(n)]
    con = duckdb.connect()
    cache.ensure_tables(con)
    day = dt.date(2026, 11, 20)
    t0 = time.perf_counter()
    rows, model, store = online.day_model(c.values, keys, 5, None, bad=1, config=cfg)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache.save_day(con, "kernel_mean_ns", day, "bench", *store, nu=cfg.nu)
    save_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cached = cache.load_day(con, "kernel_mean_ns", day, "bench")
    rows2, model2, again = online.day_model(c.values, keys, 5, cached, bad=1, config=cfg)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = online.sequential_alarms(c.values, 5, bad=1, thresholds=thresholds, config=cfg, model=model2, rows=rows2)
    scan_s = time.perf_counter() - t0
    fresh = online.sequential_alarms(c.values, 5, bad=1, thresholds=thresholds, config=cfg, model=model, rows=rows)
    assert again is None and (fresh.alarms.alarm == res.alarms.alarm).all()
    return {"n": n, "fit_s": fit_s, "save_s": save_s, "load_s": load_s, "scan_s": scan_s, "alarms": int(res.alarms.alarm.sum())}


def history_sweep(n: int, seed: int, histories=(192, 264, 384), cfg=sq.SequentialConfig()) -> dict[int, tuple[int, float]]:
    """False alarms of the hourly path at ``DEFAULT_THRESHOLDS`` on ``n`` clean series with
    ``history`` hours before 7 days of hourly runs (the measurement behind
    ``online.MIN_HISTORY_HOURS``, docs/detection.md): history -> (alerts, per 1,000 series-days)."""
    out = {}
    for hist in histories:
        c = make_corpus(n, hours=hist + 24 * DAYS, seed=seed, step_fraction=0.0, improvement_fraction=0.1,
                        onset_range=(hist + 12, hist + 24 * DAYS - 13))
        alerts = rows.alerts_from_stats(*rows.product_stats(c.values, hist, cfg), sq.DEFAULT_THRESHOLDS, cfg)
        fp = sum(len(a) for a in alerts)
        out[hist] = (fp, 1000.0 * fp / (n * DAYS))
    return out


def print_cost(sp: dict, cfg) -> None:
    """The cost table of ``speed``'s result (markdown)."""
    hourly = sp["load_s"] + sp["scan_s"]
    per = (hourly + (sp["fit_s"] + sp["save_s"]) / 24) / sp["n"] * 1e6
    refit = (sp["fit_s"] + sp["scan_s"]) / sp["n"] * 1e6
    print(f"\n## Cost\n\n| what | series | time |\n|---|---|---|\n"
          f"| noise-model fit on {cfg.fit_hours} h (online.day_model; the day's first run) | {sp['n']:,} | {sp['fit_s']:.1f} s |\n"
          f"| store the day's models (analytics.store.noise_models.save_day, DuckDB) | {sp['n']:,} | {sp['save_s']:.1f} s |\n"
          f"| every run: read the day's models back (load_day + day_model) | {sp['n']:,} | {sp['load_s']:.1f} s |\n"
          f"| every run: scan with the day's model (online.sequential_alarms) | {sp['n']:,} | {sp['scan_s']:.1f} s |\n"
          f"| per series-hour (read + scan + 1/24 of fit and store) | 1 | {per:.0f} µs |\n"
          f"| per series-hour refitting every run (fit + scan, no cache) | 1 | {refit:.0f} µs |\n"
          f"\n({sp['alarms']} alarms in the speed corpus' last hour; one process; the SQL load of "
          f"{online.lookback_hours(cfg)} h per series is not in these times)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--cal-series", type=int, default=36000, help="clean calibration series (seeds 101+)")
    ap.add_argument("--clean-series", type=int, default=4400, help="clean test series (seed 11): 7 days each")
    ap.add_argument("--step-series", type=int, default=2400, help="test series with one regression step (seed 12)")
    ap.add_argument("--old-series", type=int, default=300, help="step and clean series each for detect_regressions")
    ap.add_argument("--slow-series", type=int, default=150, help="step and clean series each for Otava and PELT")
    ap.add_argument("--speed-series", type=int, default=100_000)
    ap.add_argument("--history-sweep", type=int, default=0, help="only the history sweep on this many clean series (seed 32)")
    ap.add_argument("--target", type=float, default=0.9, help="calibration target, false alarms per 1,000 series-days")
    ap.add_argument("--thresholds", default="",
                    help="with --product-only: comma-separated thresholds for m = 3..12 instead of calibrating on --cal-series "
                         "(e.g. those benchmarks/calibration_size.py printed for the same seed-101 series and target)")
    ap.add_argument("--product-only", action="store_true",
                    help="only the cudawatch hourly-path row (calibrated on --cal-series): a method change's cost in recall")
    ap.add_argument("--glr-only", action="store_true",
                    help="only the GLR rows (oracles and cudawatch), not detect_regressions, the competitors or the cost")
    ap.add_argument("--rows", default="", help="with --glr-only: comma-separated words; keep the GLR rows whose name holds one "
                                               "(e.g. 'robust,model-known,cudawatch')")
    ap.add_argument("--speed-only", action="store_true",
                    help="only the cost of the hourly update on --speed-series series, at DEFAULT_THRESHOLDS")
    args = ap.parse_args(argv)
    if args.speed_only:
        t0 = time.perf_counter()
        print_cost(speed(args.speed_series, 5, sq.DEFAULT_THRESHOLDS), sq.SequentialConfig())
        print(f"\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
              f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; wall {time.perf_counter() - t0:.0f} s")
        return 0
    if args.history_sweep:
        print("| history before the runs | false alarms | per 1,000 series-days |\n|---|---|---|")
        for hist, (fp, rate) in history_sweep(args.history_sweep, 32).items():
            print(f"| {hist} h | {fp} | {rate:.2f} |")
        print(f"\n({args.history_sweep} clean series, seed 32, {DAYS} days of hourly runs, DEFAULT_THRESHOLDS)")
        return 0
    if args.quick:
        args.cal_series, args.clean_series, args.step_series, args.old_series, args.slow_series, args.speed_series = 800, 600, 400, 40, 10, 5000

    t_start = time.perf_counter()
    given = None
    if args.thresholds:
        if not args.product_only:
            ap.error("--thresholds needs --product-only")
        given = [float(x) for x in args.thresholds.split(",")]
        given = np.array([np.inf] * (sq.SequentialConfig().max_window - len(given)) + given)
    cal = None if given is not None else corpus(args.cal_series, 101, steps=False)
    clean = corpus(args.clean_series, 11, steps=False)
    steps = corpus(args.step_series, 12, steps=True)
    results, notes, thresholds = {}, {}, {}
    cfg = sq.SequentialConfig()
    glr_rows = {} if args.product_only else {
        "clairvoyant t(4)-GLR (noise model and outlier hours known)": lambda c: rows.oracle_stats(c, HISTORY, clairvoyant=True),
        "robust oracle (noise model known, outlier hours not)": lambda c: rows.oracle_stats(c, HISTORY, clairvoyant=False),
        MODEL_ORACLE: lambda c: rows.model_oracle_stats(c, HISTORY),
    }
    glr_rows[CW] = lambda c: rows.product_stats(c.values, HISTORY, cfg)
    if args.rows:
        if not args.glr_only:
            ap.error("--rows needs --glr-only")
        keep = [w.strip() for w in args.rows.split(",") if w.strip()]
        glr_rows = {k: v for k, v in glr_rows.items() if any(w in k for w in keep)}
        if CW not in glr_rows:
            ap.error("--rows must keep the cudawatch row (its thresholds are printed)")
    # each GLR row under the product's calibration weights, and (not with --thresholds) under equal
    # weights per window length: what the weighting buys and costs, the oracles' included
    weightings = {"": fleet_calibration.WINDOW_WEIGHTS}
    if given is None and np.ptp(cal_module.window_weights(fleet_calibration.WINDOW_WEIGHTS, cfg.max_window)) > 0:
        weightings[EQUAL_TAG] = EQUAL
    for row_name, fn in glr_rows.items():
        calibrated = {}
        if given is None:
            cal_stats = fn(cal)
            for tag, weights in weightings.items():
                h, p, rate = rows.calibrate(*cal_stats, args.target, cfg, weights=weights)
                calibrated[tag] = h, f"calibrated at {rate:.2f} / 1,000 series-days (tail p {p:.1e})"
            del cal_stats
        step_stats, clean_stats = fn(steps), fn(clean)
        for tag in weightings:
            name = row_name + tag
            h, note = calibrated.get(tag, (given, "thresholds given on the command line (not calibrated in this run)"))
            thresholds[name] = h
            a_steps = rows.alerts_from_stats(*step_stats, h, cfg)
            a_clean = rows.alerts_from_stats(*clean_stats, h, cfg)
            results[name] = score(a_steps, a_clean, steps, args.clean_series)
            notes[name] = note
        del step_stats, clean_stats
    if args.product_only or args.glr_only:
        args.speed_series = 0
    else:
        _other_rows(args, steps, clean, thresholds[CW], results, notes)

    print(f"# Detection benchmark\n\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; wall {time.perf_counter() - t_start:.0f} s\n"
          f"command: `.venv/bin/python benchmarks/detection.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
          f"corpus: {HOURS} h per series ({HISTORY} h history, then {DAYS * 24} hourly runs); "
          f"{'thresholds given' if given is not None else f'calibration {args.cal_series} clean series (seed 101)'}; test {args.clean_series} clean series (seed 11, 10 % with an improvement step) = "
          f"{args.clean_series * DAYS:,} clean series-days, {args.step_series} step series (seed 12); calibration target "
          f"{args.target} false / 1,000 series-days.\n")
    print("| method | false / 1,000 clean series-days | precision | k=3σ within 3 / 6 / 12 runs | k=4σ within 3 / 6 | k=6σ within 3 | "
          "onset ±1 h (k ≥ 3) | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        kk = r["k"]
        on = [kk[x]["onset1"] for x in (3.0, 4.0, 6.0, 10.0) if x in kk]
        print(f"| {name} | {f2(r['fa'])} ({r['fp_clean']}) | {f2(r['precision'])} | "
              f"{f2(kk.get(3.0, {}).get('r3'))} / {f2(kk.get(3.0, {}).get('r6'))} / {f2(kk.get(3.0, {}).get('r12'))} | "
              f"{f2(kk.get(4.0, {}).get('r3'))} / {f2(kk.get(4.0, {}).get('r6'))} | {f2(kk.get(6.0, {}).get('r3'))} | "
              f"{f2(min(on)) if on else '–'}–{f2(max(on)) if on else '–'} | {notes[name]} |")
    print("\nrecall within 3 / 6 / 12 runs by k (steps >= 2 %):\n")
    print("| method | " + " | ".join(f"k={x:g} (n)" for x in K_SHOW) + " |")
    print("|---|" + "---|" * len(K_SHOW))
    for name, r in results.items():
        cells = [f"{f2(r['k'][x]['r3'])} / {f2(r['k'][x]['r6'])} / {f2(r['k'][x]['r12'])} ({r['k'][x]['n']})" if x in r["k"] else "–"
                 for x in K_SHOW]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nthresholds (GLR per window length m = 1..{cfg.max_window}): " + ", ".join(f2(x) for x in thresholds[CW]))
    if args.speed_series:
        print_cost(speed(args.speed_series, 5, thresholds[CW], cfg), cfg)
    return 0


def _other_rows(args, steps, clean, h_cw, results, notes) -> None:
    """The rows beside the GLR rows: detect_regressions on DuckDB (sequential and change points
    only), Otava, PELT and the EWMA rule."""
    k = args.old_series
    h_cw = tuple(h_cw)
    full = "cudawatch detect_regressions on DuckDB (the whole hourly path, same thresholds)"
    t0 = time.perf_counter()
    results[full] = score(rows.old_detect_regressions(steps.values[:k], HISTORY, thresholds=h_cw),
                          rows.old_detect_regressions(clean.values[:k], HISTORY, thresholds=h_cw),
                          _sub(steps, k), k)
    notes[full] = f"{k} step + {k} clean series; {1e3 * (time.perf_counter() - t0) / (2 * k * (HOURS - HISTORY)):.1f} ms per series-run"
    old = "cudawatch detect_regressions, change points only (previous hourly path)"
    results[old] = score(rows.old_detect_regressions(steps.values[:k], HISTORY, sequential=False),
                         rows.old_detect_regressions(clean.values[:k], HISTORY, sequential=False), _sub(steps, k), k)
    notes[old] = f"{k} step + {k} clean series"
    for name in rows.COMPETITORS:
        s = args.slow_series
        results[name] = score(rows.competitor(name, steps.values[:s], HISTORY), rows.competitor(name, clean.values[:s], HISTORY),
                              _sub(steps, s), s)
        notes[name] = f"{s} step + {s} clean series"
    results["EWMA rule (design article)"] = score(rows.ewma_rule(steps.values, HISTORY), rows.ewma_rule(clean.values, HISTORY),
                                                  steps, args.clean_series)
    notes["EWMA rule (design article)"] = ""


def _sub(c, k):
    from dataclasses import replace

    return replace(c, values=c.values[:k], onset=c.onset[:k], k=c.k[:k], step_pct=c.step_pct[:k], sigma=c.sigma[:k],
                   up=c.up[:k], mean_log=None, outlier_log=None)


if __name__ == "__main__":
    raise SystemExit(main())
