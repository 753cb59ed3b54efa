"""False alarms and recall of the change-point path as the hourly path runs it on short-history
series (by default a series' second day, 24-47 h of data before the first run; ``--history``), per
``DetectConfig.max_pvalue``.

``analytics.detect.detect_regressions`` sends a series to the change points
(``analytics.lifecycle.find_steps``) until its noise-model fit history holds
``young.YOUNG_HISTORY_HOURS`` valid hours (``online.MIN_HISTORY_HOURS`` before young rows:
``replay(young_history=None)``); since then the path's population is a series' first one to two
days, the default ``--history 24,47 --step-history 0,23`` (series with 48 h or more never reach
it now: the old defaults ``48,167`` / ``48,143`` measure nothing and are refused). This benchmark replays that path hour by hour on
simulator/corpus.py series (``make_corpus``, values rounded as the warehouse stores them,
``simulator.corpus.kernel_rows``), each with NaN before its first hour, with the product's
functions in the product's order (``replay``): the trailing ``online.lookback_hours`` per run; the
day's sequential rows from ``online.fit_day`` (those runs are not counted); the fleet's drift
(``estimate_drift``) and tail screen (``screen_tail``) on the last ``lookback_hours``; ``find_steps``
on screened series and series with a known event; ``update_open``, the ``tail_hours`` and
magnitude rules, ``candidate`` and ``dedup`` against an in-memory ``regressions`` table. An alert is
an event stored as new (or resolved), not as went_away (what ``reported_since`` reports).
``--verify N`` only checks the replay against ``detect_regressions`` on DuckDB (N clean and N step
series; the p-values and a loose 1e-4): the same stored events, or it says DIFFERENT.

- clean: ``make_corpus`` clean series (10 % with an improvement step), history U{24..47} h before
  the first run (``--history LO,HI``); one run per hour while the product sends the series to the
  change points (until the UTC day its fit history reaches 24 h; 168 h with young_history=None);
  series-days = those runs / 24;
- steps: one regression step per series, history U{0..23} h before the first run
  (``--step-history LO,HI``), onset 24 h after it, runs up to onset + 11; recall within 3/6/12 runs
  of this path (a series that turns young leaves it) and onset +-3 h as benchmarks/detection.py's
  ``score``.

Dev seeds choose the value (largest p-value with dev <= --target); the check seed only confirms.

    PYTHONPATH=. .venv/bin/python benchmarks/changepoint_fa.py --pvalues 1e-6,5e-7,2e-7,1e-7,5e-8,2e-8 \\
        --dev-seeds 301,302 --check-seed 303 --clean-series 4500 --step-series 2400 --history 48,167 --step-history 48,143
    # 843 s (14 min) under nice -n 5 on the 2-core VM shared with another benchmark (2026-12-05, before young
    # rows: today these ranges never reach the change points and the run stops)
    PYTHONPATH=. .venv/bin/python benchmarks/changepoint_fa.py --pvalues 1e-6,5e-7,2e-7,1e-7,5e-8 \\
        --dev-seeds 301,302 --check-seed 303 --clean-series 20000 --step-series 4000 --history 24,47 --step-history 0,23
    # the population the path has since young rows (2026-12-06): a series' second day; 300-360 s
    PYTHONPATH=. .venv/bin/python benchmarks/changepoint_fa.py --pvalues 1e-6,5e-8 --verify 150   # 262 s
    PYTHONPATH=. .venv/bin/python benchmarks/changepoint_fa.py --quick                            # 25 s
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import online  # noqa: E402
from analytics.lifecycle import DetectConfig, candidate, dedup, find_steps, update_open  # noqa: E402
from analytics.store import series as sr  # noqa: E402
from analytics.store.regressions import OPEN  # noqa: E402
from analytics.trend import estimate_drift, screen_tail  # noqa: E402
from benchmarks import detection_rows  # noqa: E402
from benchmarks.detection import K_SHOW, f2, score  # noqa: E402
from simulator.corpus import make_corpus  # noqa: E402

SPEC = sr.SPEC_BY_NAME["kernel_mean_ns"]  # the corpus' series: one kernel's hourly mean duration
CONFIG = DetectConfig(series=(SPEC.name,))
T0 = detection_rows.T0  # column 0, a UTC midnight
L = max(CONFIG.lookback_hours, online.lookback_hours(CONFIG.seq))  # hours detect_regressions loads
FIRST = L  # column of the clean series' first run (every run sees L columns)
HISTORY = (24, 47)  # hours of data before a clean series' first run (--history): a series' second day
STEP_HISTORY = (0, 23)  # the same for a step series, whose onset is 24 h after its first run (--step-history)


def short_history(n: int, seed: int, *, steps: bool, history: tuple[int, int] | None = None):
    """(corpus, first run, last run) per series; values NaN before each series' first hour.
    history: (lo, hi) hours of data before the first run, drawn uniformly (default HISTORY or
    STEP_HISTORY)."""
    rng = np.random.default_rng((seed, 15))
    lo, hi = history or (STEP_HISTORY if steps else HISTORY)
    if steps:  # the step 24 h after the first run, runs until 11 h after the onset
        onsets = (FIRST + 24, FIRST + 47)
        c = make_corpus(n, hours=onsets[1] + 12, seed=seed, step_fraction=1.0, improvement_fraction=0.0, onset_range=onsets)
        first, last = c.onset - 24, c.onset + 11
    else:  # runs up to 7 days (a series whose model fails would stay on the change points)
        c = make_corpus(n, hours=FIRST + 7 * 24, seed=seed, step_fraction=0.0, improvement_fraction=0.1,
                        onset_range=(FIRST, FIRST + 120))
        first, last = np.full(n, FIRST), np.full(n, FIRST + 7 * 24 - 1)
    hist = rng.integers(lo, hi + 1, n)
    values = np.rint(c.values * 100) / 100  # kernel_rows: total_ns of 100 launches, an integer
    values[np.arange(c.values.shape[1])[None, :] < (first - hist)[:, None]] = np.nan
    return replace(c, values=values), first, last


class Table:
    """One p-value's ``regressions`` table in memory (the columns the lifecycle reads), per series."""

    def __init__(self, n: int):
        self.rows: list[list[dict]] = [[] for _ in range(n)]

    def alerts(self) -> list[list[tuple[int, int]]]:
        """(onset, run) columns of the events stored as reported (not went_away), per series."""
        return [[(_col(r["onset"]), _col(r["detected_at"])) for r in rows if r["first_status"] != "went_away"] for rows in self.rows]

    def run(self, mat: sr.SeriesMatrix, cp: np.ndarray, screened: np.ndarray, cfg: DetectConfig) -> None:
        """One hourly run of detect_regressions' change-point branch; ``mat`` is the last
        ``lookback_hours`` (detect's ``_tail``), ``cp`` the rows the branch owns this run."""
        as_of = mat.end
        since = as_of - cfg.lookback_hours * sr.HOUR
        known = {i: k for i in np.flatnonzero(cp) if self.rows[i]  # events.known_events
                 and (k := [r for r in self.rows[i] if r["status"] in OPEN or r["onset"] > since])}
        todo = cp & screened
        todo[list(known)] = True
        cands, updates = [], []
        for i in np.flatnonzero(todo):
            steps = find_steps(mat.values[i], bad=SPEC.bad, period=SPEC.period, config=cfg)
            updates += update_open(known.get(i, []), steps, mat, i, as_of, cfg)
            for st in steps:
                if st.index >= mat.hours - cfg.tail_hours and abs(st.magnitude_pct) >= cfg.min_magnitude_pct:
                    # min_share (0 by default) never drops a candidate: not applied
                    cands.append(candidate(SPEC.name, mat, i, sr.series_key(SPEC.name, mat.keys[i]), st, {}, {}, as_of, cfg))
        by_id = {r["event_id"]: r for rows in known.values() for r in rows}
        for event_id, status, after, mag, p, ended in updates:  # events.save_events
            by_id[event_id].update(status=status, after=after, magnitude_pct=mag, p_value=p, ended_at=ended, updated_at=as_of)
        for c in dedup(cands, [r for rows in known.values() for r in rows], cfg):
            r = c.reg
            self.rows[int(r.job[3:])].append(dict(
                event_id=r.event_id, series=r.series, job=r.job, kernel_id=r.kernel_id, gpu_uuid=r.gpu_uuid,
                signature=r.signature, onset=r.onset, before=r.before, after=r.after, magnitude_pct=r.magnitude_pct,
                p_value=r.p_value, status=r.status, first_status=r.status, detected_at=as_of, updated_at=as_of,
                ended_at=c.ended_at))


def _col(t: dt.datetime) -> int:
    return round((t - T0).total_seconds() / 3600)


def replay(values, first, last, pvalues, config: DetectConfig = CONFIG, young_history: int | None = CONFIG.seq_young_history):
    """The hourly path's change-point branch for every hour from min(first) to max(last), one
    ``Table`` per p-value (drift, screen and the day's sequential rows do not depend on it).
    young_history: the sequential path's young rows (None: as before they existed, every row with
    less than a week of fit history on the change points).
    Returns ({p: Table}, cp): cp[i, t] is True when run t tested series i on the change points."""
    n = values.shape[0]
    width = len(str(max(n - 1, 0)))
    keys = [(f"job{i:0{width}d}", "k", "kid", None, None) for i in range(n)]  # as kernel_rows names them
    tables = {p: Table(n) for p in pvalues}
    cp_runs = np.zeros(values.shape, dtype=bool)
    seq_rows = None
    for t in range(int(first.min()), int(last.max()) + 1):
        v = values[:, t + 1 - L : t + 1]
        hod = t % 24
        if seq_rows is None or hod == 0:  # the day's model (online.day_model): its rows go sequential
            seq_rows = online.fit_day(v, hod, bad=SPEC.bad, config=config.seq, min_history=config.seq_min_history,
                                      young_history=young_history)[0]
        cp = (first <= t) & (t <= last)
        cp[seq_rows] = False
        if not cp.any() and t >= first.max():
            break  # every series has left the change points (its history only grows)
        cp_runs[:, t] = cp
        short = v[:, -config.lookback_hours :]
        drift = estimate_drift(short) if config.drift is None else config.drift
        screened = screen_tail(short, SPEC.bad, config.screen_z, window=config.window)
        mat = sr.SeriesMatrix(SPEC, T0 + t * sr.HOUR, keys, short, np.where(np.isnan(short), 0.0, 100.0))
        for p, table in tables.items():
            table.run(mat, cp, screened, replace(config, max_pvalue=p, drift=drift))
    return tables, cp_runs


def verify(c, first, last, pvalues) -> str:
    """The replay against detect_regressions on DuckDB (detection_rows.old_detect_regressions) on
    the same series: every stored event (any status) detected by a change-point run, per p-value."""
    tables, cp = replay(c.values, first, last, pvalues)
    out = []
    for p in pvalues:
        mine = {(i, _col(r["onset"]), _col(r["detected_at"])) for i, rows in enumerate(tables[p].rows) for r in rows}
        db = detection_rows.old_detect_regressions(c.values[:, : int(last.max()) + 1], int(first.min()), went_away=True,
                                                   max_pvalue=p)
        theirs = {(i, o, r) for i, al in enumerate(db) for o, r in al if cp[i, r]}
        out.append(f"max_pvalue {p:g}: {len(mine)} events in the replay, {len(theirs)} in DuckDB, "
                   f"{'the same' if mine == theirs else 'DIFFERENT'}")
    return "; ".join(out)


def measure(n, seed, pvalues, history=None) -> tuple:
    """n clean series of a seed: (n, series-days on the change points, {p: false alarms})."""
    c, first, last = short_history(n, seed, steps=False, history=history)
    tables, cp = replay(c.values, first, last, pvalues)
    return n, cp.sum() / 24, {p: sum(len(a) for a in tables[p].alerts()) for p in pvalues}


def _hours_range(ap: argparse.ArgumentParser, text: str | None) -> tuple[int, int] | None:
    """'LO,HI' -> (LO, HI) with 0 <= LO <= HI (None when not given)."""
    if not text:
        return None
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        ap.error(f"expected LO,HI hours, got {text!r}")
    if not 0 <= lo <= hi:
        ap.error(f"expected 0 <= LO <= HI, got {text!r}")
    return lo, hi


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pvalues", default="1e-6,1e-7,5e-8", help="comma-separated max_pvalue values")
    ap.add_argument("--dev-seeds", default="301,302", help="clean seeds that choose the value")
    ap.add_argument("--check-seed", type=int, default=303, help="clean seed that only confirms it")
    ap.add_argument("--check-series", type=int, default=0, help="clean series of the check seed (0: as many as all dev seeds)")
    ap.add_argument("--step-seed", type=int, default=312)
    ap.add_argument("--clean-series", type=int, default=4500, help="clean series per seed")
    ap.add_argument("--step-series", type=int, default=2400)
    ap.add_argument("--target", type=float, default=1.0, help="false alarms per 1,000 clean series-days")
    ap.add_argument("--verify", type=int, default=0,
                    help="only check the replay against detect_regressions on DuckDB, on this many clean and step series")
    ap.add_argument("--history", default=None, help=f"LO,HI hours of data before a clean series' first run (default {HISTORY})")
    ap.add_argument("--step-history", default=None,
                    help=f"LO,HI hours of data before a step series' first run, its onset 24 h later (default {STEP_HISTORY})")
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = ap.parse_args(argv)
    hist, step_hist = (_hours_range(ap, h) for h in (args.history, args.step_history))
    if args.quick:
        args.clean_series, args.check_series, args.step_series = 300, 300, 200
    t_start = time.perf_counter()
    pvalues = [float(x) for x in args.pvalues.split(",")]
    dev_seeds = [int(x) for x in args.dev_seeds.split(",")]
    if args.verify:  # only the check of the replay, with a loose p-value that makes many events too
        for kind, steps in (("clean", False), ("steps", True)):
            seed = args.step_seed if steps else dev_seeds[0]
            series = short_history(args.verify, seed, steps=steps, history=step_hist if steps else hist)
            print(f"{kind} ({args.verify} series, seed {seed}): " + verify(*series, pvalues + [1e-4]))
        print(f"wall {time.perf_counter() - t_start:.0f} s")
        return 0
    res = {s: measure(args.clean_series, s, pvalues, hist) for s in dev_seeds}
    res[args.check_seed] = measure(args.check_series or args.clean_series * len(dev_seeds), args.check_seed, pvalues, hist)
    steps, first, last = short_history(args.step_series, args.step_seed, steps=True, history=step_hist)
    tables, step_cp = replay(steps.values, first, last, pvalues)
    recall = {p: score(tables[p].alerts(), [], steps, 1)["k"] for p in pvalues}
    empty = [f"seed {s}" for s in res if res[s][1] == 0] + (["the step series"] if step_cp.sum() == 0 else [])
    if empty:  # a rate over nothing is not a result: these series never reached the change points
        raise SystemExit(f"no runs on the change-point path for {', '.join(empty)}: the histories "
                         f"(--history {hist or HISTORY}, --step-history {step_hist or STEP_HISTORY}) are past where detect sends series there")

    def rate(seeds, p):
        return 1000.0 * sum(res[s][2][p] for s in seeds) / sum(res[s][1] for s in seeds)

    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"# The change-point path on short-history series\n\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"wall {time.perf_counter() - t_start:.0f} s\ncommand: `PYTHONPATH=. .venv/bin/python benchmarks/changepoint_fa.py {cmd}`\n")
    print("False alarms per 1,000 clean series-days (count in brackets; dev seeds choose, the check seed confirms):\n")
    cols = [f"seed {s} ({res[s][0]:,} series, {res[s][1]:,.0f} series-days)" for s in dev_seeds]
    print(f"| max_pvalue | {' | '.join(cols)} | dev pooled | check seed {args.check_seed} ({res[args.check_seed][1]:,.0f} series-days) |")
    print("|---|" + "---|" * (len(dev_seeds) + 2))
    for p in pvalues:
        cells = [f"{rate([s], p):.2f} ({res[s][2][p]})" for s in dev_seeds]
        dev_n = sum(res[s][2][p] for s in dev_seeds)
        print(f"| {p:g} | {' | '.join(cells)} | {rate(dev_seeds, p):.2f} ({dev_n}) | "
              f"{rate([args.check_seed], p):.2f} ({res[args.check_seed][2][p]}) |")
    print(f"\nRecall within 3 / 6 / 12 hourly runs, onset ±3 h ({args.step_series} step series, seed {args.step_seed}; n per k):\n")
    print("| max_pvalue | " + " | ".join(f"k={k:g}" for k in K_SHOW) + " |\n|---|" + "---|" * len(K_SHOW))
    for p in pvalues:
        r = recall[p]
        print(f"| {p:g} | " + " | ".join(f"{f2(r[k]['r3'])} / {f2(r[k]['r6'])} / {f2(r[k]['r12'])} ({r[k]['n']})"
                                         if k in r else "–" for k in K_SHOW) + " |")
    ok = [p for p in pvalues if rate(dev_seeds, p) <= args.target]
    if ok:
        best = max(ok)
        check = rate([args.check_seed], best)
        print(f"\nLargest max_pvalue with the pooled dev seeds <= {args.target:g}: {best:g}; check seed there: {check:.2f}"
              f"{'' if check <= args.target else ' (ABOVE the target)'}; each dev seed: "
              f"{', '.join(f'{rate([s], best):.2f}' for s in dev_seeds)}")
    else:
        print(f"\nNo max_pvalue keeps the pooled dev seeds <= {args.target:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
