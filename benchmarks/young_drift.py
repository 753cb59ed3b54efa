"""A new fleet's young rows and their random-walk drift: how the pooled estimate behaves on clean
simulated fleets, and what a conservative pooling buys and costs.

In a fleet younger than a week no row is mature, so ``analytics.online.fit_day`` gives a family's
young rows the drift ``young.fitted_drift`` pools from their own hourly lags
(``young.lag_drift_q2``): their median before young model 2026-12-06.2, the median's upper
confidence bound (``young.upper_median``) since. Three measurements, each per pooling rule:

- ``estimators``: per clean fleet (``simulator.simulate_fleet``, 8 GPUs, 96 h; the simulator's
  series walk 0.15 %/h), family and UTC day (the fits of hours 48 and 72), the young rows' drift
  in %/h pooled by the median, the upper bound at z = 1.96 (the product), the mean, a 20 %-trimmed
  mean, and one estimate from all rows' lag changes pooled in sigma units (``pooled_lag_q2``);
- ``events``: the clean fleets analysed as ``benchmarks/rootcause.py`` analyses its clean fleets
  (``detect.detect_regressions`` every hour from 24 to 88, then 95), events stored per fleet;
- ``recall``: a k-sigma step 2 h after the first run in row 0 of an n-row young family (4 days of
  history, ``tests/analytics/test_sequential.series``, with or without a 0.15 %/h walk), run by
  ``detection_rows.old_detect_regressions`` (the product on DuckDB) for 12 hourly runs: found
  within 3 runs (onset +-1 h), and ever.

Pooling rules, swapped in for ``young.fitted_drift``: ``product`` (as shipped), ``median``
(``noise_model.pooled_drift``, the rule before 2026-12-06.2) and ``ucb:Z`` (``young.upper_median``
at Z: the order statistic of rank ceil(n/2 + Z sqrt(n)/2) of the n rows' estimates, the largest
when n is smaller).

    PYTHONPATH=. .venv/bin/python benchmarks/young_drift.py estimators --seeds 13000-13009,15000-15009
    PYTHONPATH=. .venv/bin/python benchmarks/young_drift.py events --seeds 13000-13009 --rules median,ucb:1.96,ucb:1.0
    PYTHONPATH=. .venv/bin/python benchmarks/young_drift.py recall --rules median,ucb:1.96,ucb:1.0 --reps 12
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import noise_model as nm  # noqa: E402
from analytics import online, young  # noqa: E402

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
PRODUCT_FITTED_DRIFT = young.fitted_drift


def use_rule(rule: str) -> None:
    """Make ``young.fitted_drift`` pool by ``rule``: ``product`` (the shipped function), ``median``
    (``noise_model.pooled_drift``, the rule before 2026-12-06.2) or ``ucb:Z``."""
    check_rule(rule)
    if rule == "product":
        young.fitted_drift = PRODUCT_FITTED_DRIFT
        return
    pool = np.median if rule == "median" else functools.partial(young.upper_median, z=float(rule[4:]))
    young.fitted_drift = lambda x, hour_of_day, model: nm.pooled_drift(young.row_drift_q2(x, hour_of_day, model), pool=pool)


def check_rule(rule: str) -> None:
    """Fail at once on a rule use_rule would not know (not after minutes of runs)."""
    ok = rule in ("product", "median")
    if rule.startswith("ucb:"):
        try:
            ok = float(rule[4:]) >= 0
        except ValueError:
            ok = False
    if not ok:
        raise SystemExit(f"unknown rule {rule!r}: product, median or ucb:Z with Z >= 0")


def fleet(seed: int, root: Path) -> Path:
    """A clean 96-h, 8-GPU fleet's warehouse (built once under ``root``)."""
    import simulator
    from analytics import store

    db = root / f"fleet{seed}" / "w.duckdb"
    if not db.exists():
        simulator.simulate_fleet(db.parent / "shards", gpus=8, hours=96, seed=seed, start=START, injections=[])
        con = store.connect(db)
        store.ingest_shards(db.parent / "shards", con)
        con.close()
    return db


def estimators(seeds: list[int], root: Path) -> None:
    from analytics import store
    from analytics.store import series as sr

    print("| fleet | day (fit at hour) | family | young rows | median (before) | UCB z=1.96 (product) | mean | 20 %-trimmed mean "
          "| pooled lag changes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        con = store.connect(fleet(seed, root), read_only=True)
        for hour in (48, 72):
            for spec in sr.SPECS:
                if not spec.sequential:
                    continue
                x = sr.load_matrix(con, spec, START + dt.timedelta(hours=hour), online.lookback_hours()).values
                rows, model = online.fit_day(x, 0, bad=spec.bad, young_history=young.YOUNG_HISTORY_HOURS)
                if model is None:
                    continue
                w = online.fit_window(x.shape[1], 0)
                y = nm.to_log(x[rows, w], spec.bad) - model.cycle(online.hour_of_day(x.shape[1], 0)[w])
                q2 = young.lag_drift_q2(y, model.sigma, model.phi)
                q2 = np.sort(q2[np.isfinite(q2)])
                if q2.size == 0:
                    continue
                k = int(0.2 * q2.size)
                cells = [np.median(q2), young.upper_median(q2, 1.96), q2.mean(), q2[k:q2.size - k].mean(),
                         pooled_lag_q2(y, model.sigma, model.phi)]
                pct = " | ".join(f"{100 * np.sqrt(max(c, 0.0)):.3f}" for c in cells)
                print(f"| {seed} | {hour} | {spec.name} | {q2.size} | {pct} |", flush=True)
        con.close()


def pooled_lag_q2(y: np.ndarray, sigma: np.ndarray, phi: np.ndarray) -> float:
    """One estimate for the family: every row's lag changes in units of its sigma, one robust
    variance per lag over all of them (``lag_drift_q2``'s formula on the pooled changes), times the
    rows' median sigma squared. Pools before the difference, where ``lag_drift_q2`` pools after."""
    z = y / sigma[:, None]

    def v(lag):
        d = (z[:, lag:] - z[:, :-lag]).ravel()
        return (nm.MAD_TO_SD * np.median(np.abs(d[np.isfinite(d)]))) ** 2

    S, L = young.SHORT_LAG, young.LONG_LAG
    return (v(L) - v(S) - 2 * float(np.mean(phi**S - phi**L))) / (L - S) * float(np.median(sigma)) ** 2


def events(seeds: list[int], rules: list[str], root: Path) -> None:
    from analytics import detect, store

    print("| rule | events per fleet | total | fleets with any | events (family, onset hour, magnitude %) |")
    print("|---|---|---|---|---|")
    for rule in rules:
        use_rule(rule)
        per, listed = [], []
        for seed in seeds:
            tmp = Path(tempfile.mkdtemp(prefix="young-drift-"))
            try:
                shutil.copy(fleet(seed, root), tmp / "w.duckdb")
                con = store.connect(tmp / "w.duckdb")
                for h in [*range(24, 89), 95]:
                    detect.detect_regressions(con, START + dt.timedelta(hours=h))
                ev = con.execute("SELECT series, onset, magnitude_pct FROM regressions ORDER BY onset").fetchall()
                con.close()
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            per.append(len(ev))
            listed += [f"{seed}: {s} h{round((o - START).total_seconds() / 3600)} {m:+.1f}" for s, o, m in ev]
        print(f"| {rule} | {', '.join(map(str, per))} | {sum(per)} | {sum(p > 0 for p in per)} | {'; '.join(listed)} |", flush=True)


def recall(rules: list[str], reps: int, first_seed: int = 100) -> None:
    from benchmarks import detection_rows
    from tests.analytics.test_sequential import series

    start = 96
    print("| rule | young rows | walk %/h | step | within 3 runs | ever (12 runs) | of |\n|---|---|---|---|---|---|---|")
    for rule in rules:
        use_rule(rule)
        for n in (4, 12, 43):
            for walk in (0.0, 0.0015):
                for pct in (6.0, 4.0):  # sigma 1 %: 6 and 4 stationary sigmas
                    by3 = ever = 0
                    for seed in range(first_seed, first_seed + reps):
                        v = series(n=n, hours=start + 12, seed=seed, sigma=0.01)
                        if walk:
                            v *= np.exp(np.cumsum(np.random.default_rng(seed + 7).normal(0, walk, v.shape), axis=1))
                        v[0, start + 2:] *= 1 + pct / 100
                        hit = [a for a in detection_rows.old_detect_regressions(v, start)[0] if abs(a[0] - start - 2) <= 1]
                        by3 += bool(hit and hit[0][1] <= start + 4)
                        ever += bool(hit)
                    print(f"| {rule} | {n} | {100 * walk:g} | {pct:g} % | {by3} | {ever} | {reps} |", flush=True)


def seed_list(text: str) -> list[int]:
    """'13000-13009,15000' -> the seeds (ranges inclusive, ascending)."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            raise SystemExit(f"seed range {part!r} runs backwards")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["estimators", "events", "recall"])
    ap.add_argument("--seeds", default="13000-13009", help="clean fleets: A-B or a comma list")
    ap.add_argument("--rules", default="median,ucb:1.96")
    ap.add_argument("--reps", type=int, default=12, help="recall: series per cell")
    ap.add_argument("--first-seed", type=int, default=100, help="recall: seed of the first series of a cell")
    ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "cudawatch-young-drift"),
                    help="where the clean fleets' warehouses are built (reused)")
    a = ap.parse_args(argv)
    for rule in a.rules.split(","):
        check_rule(rule)
    t0 = time.perf_counter()
    print(f"# young_drift {a.what} ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs)\n")
    try:
        if a.what == "estimators":
            estimators(seed_list(a.seeds), Path(a.root))
        elif a.what == "events":
            events(seed_list(a.seeds), a.rules.split(","), Path(a.root))
        else:
            recall(a.rules.split(","), a.reps, a.first_seed)
    finally:
        use_rule("product")
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
