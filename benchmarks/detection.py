"""Detection benchmark: precision, recall, onset error and time to detection vs step size k = step / sigma.

Runs cudawatch's detector (hourly, as deployed: tail screen + change points + regression rules;
and offline on whole series), Apache Otava (``compute_change_points`` with its defaults), ruptures
PELT and Binseg (l2 cost, BIC penalty 2 sigma^2 log n) and the design article's EWMA-deviation
rule on the same labelled corpus (simulator/corpus.py), then times detection over
100,000 series x 168 h and one incremental hourly update.

    .venv/bin/python benchmarks/detection.py                 # ~5 min on 2 cores
    .venv/bin/python benchmarks/detection.py --series 400 --slow-series 100 --speed-series 10000   # quick

Prints Markdown tables (results are kept in docs/benchmarks.md).
A detection matches a true step when its onset is within +-3 h; the onset error is reported
separately (fraction within +-1 h). Time to detection counts hourly runs from the onset hour's
run (1 = found in the run that first saw the new level).
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import sys
import time
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics.changepoint import detect_change_points  # noqa: E402
from analytics.detect import DetectConfig, estimate_drift, ewma, find_steps, screen_tail  # noqa: E402
from simulator.corpus import make_corpus  # noqa: E402

MATCH_H = 3
START = 48  # hourly runs start after two days of history
K_BINS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0)


# --------------------------------------------------------------------------- methods
# Each returns, per series, a list of (onset_index, run_index) alerts: the onset the method
# reports and the hourly run at which it first reported it (offline methods: run = None).


def cudawatch_hourly(values: np.ndarray, config: DetectConfig) -> list[list[tuple[int, int]]]:
    """The regression layer's logic on arrays: every hour, screen all tails, test the flagged
    series, raise a new alert for a bad-way step in the tail that is not already alerted and has
    not reverted (went_away)."""
    n, hours = values.shape
    alerts: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    open_ = np.zeros(n, dtype=bool)
    for r in range(START, hours):
        lo = max(0, r + 1 - config.lookback_hours)
        sub = values[:, lo : r + 1]
        cfg = replace(config, drift=estimate_drift(sub) or 0.0)
        todo = screen_tail(sub, +1, cfg.screen_z, window=cfg.window) | open_
        for i in np.flatnonzero(todo):
            steps = find_steps(sub[i], bad=+1, period=None, config=cfg)
            open_[i] = False
            for st in steps:
                idx = lo + st.index
                if st.index < sub.shape[1] - cfg.tail_hours or st.reverted_index is not None:
                    continue
                open_[i] = True
                if not any(abs(idx - a) <= cfg.dedup_hours for a, _ in alerts[i]):
                    alerts[i].append((idx, r))
    return alerts


def cudawatch_offline(values: np.ndarray, config: DetectConfig) -> list[list[tuple[int, None]]]:
    cfg = replace(config, drift=estimate_drift(values) or 0.0)
    out = []
    for v in values:
        out.append([(s.index, None) for s in find_steps(v, bad=+1, period=None, config=cfg)])
    return out


def ewma_rule(values: np.ndarray, alpha: float = 2 / 25, threshold: float = 0.2) -> list[list[tuple[int, int]]]:
    """The article's rule, hourly: alert when the hour exceeds the previous hour's EWMA by > 20 %;
    consecutive firing hours are one alert (generous deduplication)."""
    ew = ewma(values, alpha)
    prev = np.concatenate([np.full((values.shape[0], 1), np.nan), ew[:, :-1]], axis=1)
    fire = (values - prev) / prev > threshold
    fire[:, :START] = False
    out = []
    for row in fire:
        idx = np.flatnonzero(row & ~np.concatenate([[False], row[:-1]]))
        out.append([(int(i), int(i)) for i in idx])
    return out


def _otava_cps(series) -> list[int]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(map(float, series)))  # defaults: window 50, p 0.001
    return [int(c.index) for c in cps if c.stats.forward_change_percent() > 0]


def _sigma2(v: np.ndarray) -> float:
    d = np.diff(v)
    return float((1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)) ** 2)


def _up_bkps(v: np.ndarray, bkps) -> list[int]:
    bounds = [0] + [int(b) for b in bkps]
    out = []
    for a, b, c in zip(bounds, bounds[1:], bounds[2:]):
        if v[b:c].mean() > v[a:b].mean():
            out.append(b)
    return out


def _pelt_cps(v) -> list[int]:
    import ruptures as rpt

    v = np.asarray(v, float)
    pen = 2 * _sigma2(v) * np.log(v.size)
    return _up_bkps(v, rpt.KernelCPD(kernel="linear", min_size=3, jump=1).fit(v).predict(pen=pen))


def _binseg_cps(v) -> list[int]:
    import ruptures as rpt

    v = np.asarray(v, float)
    pen = 2 * _sigma2(v) * np.log(v.size)
    return _up_bkps(v, rpt.Binseg(model="l2", min_size=3, jump=1).fit(v).predict(pen=pen))


OFFLINE = {"otava": _otava_cps, "ruptures_pelt": _pelt_cps, "ruptures_binseg": _binseg_cps}


def offline(name: str, values: np.ndarray) -> list[list[tuple[int, None]]]:
    fn = OFFLINE[name]
    return [[(i, None) for i in fn(v)] for v in values]


def prefix_ttd(fn, values: np.ndarray, onset: np.ndarray, max_runs: int = 12) -> np.ndarray:
    """Time to detection of an offline method run hourly on growing prefixes (NaN: not within max_runs)."""
    out = np.full(len(values), np.nan)
    for i, (v, o) in enumerate(zip(values, onset)):
        for r in range(1, max_runs + 1):
            if any(abs(c - o) <= MATCH_H for c in fn(v[: o + r])):
                out[i] = r
                break
    return out


# --------------------------------------------------------------------------- scoring


def score(alerts, corpus, idx, days_per_series: float, min_step_pct: float = 2.0) -> dict:
    """Per k bin: recall, onset error, time to detection; overall precision and false alerts.

    Recall counts steps of at least ``min_step_pct`` (the detector's minimum magnitude, as the
    targets do); an alert on a smaller true step is neither a hit nor a false alert."""
    reg = corpus.regression[idx]
    small = reg & (corpus.step_pct[idx] < min_step_pct)
    onset = corpus.onset[idx]
    k = corpus.k[idx]
    tp = fp = 0
    hit = np.zeros(len(idx), dtype=bool)
    err = np.full(len(idx), np.nan)
    ttd = np.full(len(idx), np.nan)
    fp_clean = 0
    for j, al in enumerate(alerts):
        al = [(a, r) for a, r in al if a >= START or r is not None]
        matched = False
        for a, r in al:
            if small[j] and abs(a - onset[j]) <= MATCH_H:
                continue
            if reg[j] and not matched and abs(a - onset[j]) <= MATCH_H:
                matched = True
                tp += 1
                hit[j] = True
                err[j] = a - onset[j]
                ttd[j] = (r - onset[j] + 1) if r is not None else np.nan
            else:
                fp += 1
                if not reg[j]:
                    fp_clean += 1
    clean = ~reg
    hourly = any(r is not None for al in alerts for _, r in al)  # offline methods have no runs
    out = {
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "fp_per_1000_days": 1000 * fp_clean / max(1e-9, clean.sum() * days_per_series),
        "bins": {},
        "hit": hit, "err": err, "ttd": ttd,
    }
    for kb in K_BINS:
        m = reg & ~small & (k == kb)
        if not m.any():
            continue
        out["bins"][kb] = {
            "n": int(m.sum()),
            "recall": float(hit[m].mean()),
            "onset_1h": float((np.abs(err[m & hit]) <= 1).mean()) if (m & hit).any() else float("nan"),
            "ttd_median": float(np.nanmedian(ttd[m & hit])) if np.isfinite(ttd[m & hit]).any() else float("nan"),
            "recall_3": float((ttd[m] <= 3).mean()) if hourly else float("nan"),
            "recall_12": float((ttd[m] <= 12).mean()) if hourly else float("nan"),
        }
    return out


def smallest_k(res, key="recall") -> str:
    for kb in K_BINS:
        b = res["bins"].get(kb)
        if b and b[key] >= 0.9 and all(res["bins"][k2][key] >= 0.9 for k2 in K_BINS if k2 > kb and k2 in res["bins"]):
            return f"{kb:g}"
    return "none"


# --------------------------------------------------------------------------- speed


def _detect_chunk(args):
    values, drift = args
    cfg = replace(DetectConfig(), drift=drift)
    opts = cfg.cp_options(None)
    n = 0
    for v in values:
        n += len(detect_change_points(v, **opts))
    return n


def speed(n: int, seed: int, procs: int) -> dict:
    t0 = time.perf_counter()
    corpus = make_corpus(n, seed=seed + 1000, step_fraction=0.05, improvement_fraction=0.05)  # a fleet: few steps
    gen_s = time.perf_counter() - t0
    values = corpus.values
    drift = estimate_drift(values) or 0.0
    chunks = [(values[i : i + 2000], drift) for i in range(0, n, 2000)]
    t0 = time.perf_counter()
    with mp.get_context("fork").Pool(procs) as pool:
        found = sum(pool.map(_detect_chunk, chunks))
    full_s = time.perf_counter() - t0
    # one incremental hourly update: screen every tail, test the flagged series
    cfg = replace(DetectConfig(), drift=drift)
    t0 = time.perf_counter()
    hits = screen_tail(values, +1, cfg.screen_z, window=cfg.window)
    screen_s = time.perf_counter() - t0
    flagged = np.flatnonzero(hits)
    t0 = time.perf_counter()
    with mp.get_context("fork").Pool(procs) as pool:
        pool.map(_detect_chunk, [(values[flagged[i : i + 500]], drift) for i in range(0, flagged.size, 500)])
    tail_s = time.perf_counter() - t0
    return {"n": n, "gen_s": gen_s, "full_s": full_s, "found": found, "screen_s": screen_s,
            "flagged": int(flagged.size), "tail_s": tail_s, "procs": procs}


# --------------------------------------------------------------------------- report


def fmt(x, pct=False):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:.2f}" if not pct else f"{100 * x:.0f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=2000, help="corpus size for cudawatch, PELT and EWMA")
    ap.add_argument("--slow-series", type=int, default=400, help="first N series also run through Otava and Binseg")
    ap.add_argument("--speed-series", type=int, default=100_000, help="series in the speed test (0 skips it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args(argv)

    corpus = make_corpus(args.series, seed=args.seed)
    V, hours = corpus.values, corpus.values.shape[1]
    days = (hours - START) / 24
    all_idx = np.arange(args.series)
    slow_idx = np.arange(min(args.slow_series, args.series))
    cfg = DetectConfig()
    results, timings = {}, {}

    def run(name, fn, idx):
        t0 = time.perf_counter()
        al = fn(V[idx])
        timings[name] = (time.perf_counter() - t0) / len(idx) * 1000
        results[name] = score(al, corpus, idx, days)

    run("cudawatch (hourly)", lambda v: cudawatch_hourly(v, cfg), all_idx)
    run("cudawatch (offline)", lambda v: cudawatch_offline(v, cfg), all_idx)
    run("ewma rule (hourly)", ewma_rule, all_idx)
    run("ruptures PELT (offline)", lambda v: offline("ruptures_pelt", v), all_idx)
    run("otava (offline)", lambda v: offline("otava", v), slow_idx)
    run("ruptures Binseg (offline)", lambda v: offline("ruptures_binseg", v), slow_idx)
    # time to detection of offline methods rerun hourly on growing prefixes (step series only)
    reg_slow = slow_idx[corpus.regression[slow_idx]]
    for name, key, idx in (("otava (offline)", "otava", reg_slow), ("ruptures PELT (offline)", "ruptures_pelt", reg_slow)):
        ttd = prefix_ttd(OFFLINE[key], V[idx], corpus.onset[idx])
        for kb, b in results[name]["bins"].items():
            m = (corpus.k[idx] == kb) & (corpus.step_pct[idx] >= 2.0)
            b["recall_3"] = float((ttd[m] <= 3).mean()) if m.any() else float("nan")
            b["recall_12"] = float((ttd[m] <= 12).mean()) if m.any() else float("nan")
            b["ttd_median"] = float(np.nanmedian(ttd[m])) if m.any() and np.isfinite(ttd[m]).any() else float("nan")

    print(f"# Detection benchmark\n\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n"
          f"command: `.venv/bin/python benchmarks/detection.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
          f"corpus: {args.series} series x {hours} h (seed {args.seed}); {int(corpus.regression.sum())} with a regression step, "
          f"{int((~corpus.regression).sum())} regression-free ({int(((corpus.onset >= 0) & ~corpus.up).sum())} of them with an improvement step); "
          f"Otava and Binseg on the first {len(slow_idx)} series; hourly runs from hour {START}.\n")
    print("## Overall\n")
    print("| method | precision | false regressions / 1,000 regression-free series-days | smallest k with recall >= 0.9 (any time) | smallest k with recall >= 0.9 within 12 runs | ms / series |")
    print("|---|---|---|---|---|---|")
    for name, res in results.items():
        print(f"| {name} | {fmt(res['precision'])} | {fmt(res['fp_per_1000_days'])} | {smallest_k(res)} | {smallest_k(res, 'recall_12')} | {timings[name]:.1f} |")
    print("\n## By step size k = step / sigma\n")
    print("recall (any time) / recall within 3 runs / within 12 runs / median runs to detection / onset within +-1 h (of found)\n")
    print("| method | " + " | ".join(f"k={kb:g}" for kb in K_BINS) + " |")
    print("|---|" + "---|" * len(K_BINS))
    for name, res in results.items():
        cells = []
        for kb in K_BINS:
            b = res["bins"].get(kb)
            cells.append("–" if not b else f"{fmt(b['recall'])} / {fmt(b['recall_3'])} / {fmt(b['recall_12'])} / {fmt(b['ttd_median'])} / {fmt(b['onset_1h'])}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    ns = {kb: results["cudawatch (hourly)"]["bins"].get(kb, {}).get("n", 0) for kb in K_BINS}
    print("\nregression steps >= 2 % per k bin (full corpus; recall is over these): " + ", ".join(f"k={kb:g}: {n}" for kb, n in ns.items())
          + f"; {int((corpus.regression & (corpus.step_pct < 2)).sum())} steps below 2 % are not scored")
    if args.speed_series:
        sp = speed(args.speed_series, args.seed, args.procs)
        print(f"\n## Speed\n\n| what | series | time | per series |\n|---|---|---|---|\n"
              f"| full detection, {hours} h each, {sp['procs']} processes | {sp['n']:,} | {sp['full_s']:.1f} s | {1000 * sp['full_s'] / sp['n']:.2f} ms |\n"
              f"| incremental hourly update: tail screen (all series, vectorised) | {sp['n']:,} | {sp['screen_s']:.2f} s | {1e6 * sp['screen_s'] / sp['n']:.1f} us |\n"
              f"| incremental hourly update: change points on screened series ({sp['flagged']:,} flagged) | {sp['flagged']:,} | {sp['tail_s']:.1f} s | |\n"
              f"\n(speed corpus: 5 % of series with a regression step, 5 % with an improvement; generation {sp['gen_s']:.1f} s, not counted; {sp['found']} change points found)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
