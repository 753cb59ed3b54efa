"""Early recall of the sequential detector: one-change variants of its settings against the default,
on development seeds only (the protocol of benchmarks/calibration_size.py and
``benchmarks/detection.py --product-only``).

Each variant's hourly-path statistics are replayed (``benchmarks.detection_rows.product_stats``) on
``--cal-series`` clean series of seed 101, ``--dev-clean-series`` clean series of seed 202 and
``--dev-step-series`` step series of seed 201; thresholds are calibrated on seed 101 for
``--target`` false alarms per 1,000 series-days (``detection_rows.calibrate``), and the variant is
scored on seeds 202/201 (``benchmarks.detection.score``). The held-out seeds 11 and 12 are never
read here.

A variant is ``field=value`` of ``analytics.sequential.SequentialConfig`` joined by ``+`` (e.g.
``min_len=2+ref_z=4``; ``ref_z=off`` disables the hold-back), ``weights=(w1, w2, ...)``: the
calibration's tail-probability share per window length m = 1, 2, ... (the last repeats;
``analytics.fleet_calibration.WINDOW_WEIGHTS`` when not given, so ``default`` is the shipped weighting and
``weights=(1,)`` the equal split of thresholds 2026-12-04.2), or one of the special words:

- ``true_noise``: the day's noise model with the simulator's true AR coefficient and innovation
  scale (level, cycle, outlier law and drift still estimated): what estimating phi and the
  scale costs; ``true_phi``: the true AR coefficient only;
- ``oracle``: ``detection_rows.oracle_stats`` (true noise model, true level path, outlier hours
  unknown: the robust oracle of docs/benchmarks.md), the limit.

Replays are cached under ``--cache`` (one file per replay setting and corpus); settings that only
change the alarm rule (``min_len``, ``ref_z``) reuse the replay of the same statistics. Each row
also runs the isolated-outlier probe of tests/analytics/test_sequential.py with the variant's
thresholds: alarms on 8 series x 3 sizes (+8 %, +45 %, x3) x 4 ages of one outlier hour, which
must be 0, and on the same series with two consecutive outlier hours.

    nice -n 5 .venv/bin/python benchmarks/early_recall.py --variants 'default;drift_term=False;min_len=2'

Run time on the shared 2-core VM (load average 2-3): one uncached replay setting ~14 min
(12,000 + 8,000 + 2,400 series x 168 hourly runs; ``--replay-only cal|clean|steps`` splits it;
max_window=24 costs ~4x), a cached variant ~1 min (calibration, scoring and the probe).
Prints one Markdown row per variant, then the thresholds.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import os
import platform
import sys
import time
from dataclasses import fields, replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import fleet_calibration  # noqa: E402
from analytics import sequential as sq  # noqa: E402
from benchmarks import detection as det  # noqa: E402
from benchmarks import detection_rows as rows  # noqa: E402

RULE_ONLY = ("min_len", "ref_z")  # fields the replayed statistics do not depend on
SPECIAL = ("true_noise", "true_phi", "oracle")
DEFAULT = sq.SequentialConfig()


def parse_variant(spec: str) -> tuple[sq.SequentialConfig, set[str], tuple | None]:
    """'a=1+b=off+true_noise+weights=(1,1,2)' -> (config, special words, calibration weights or None)."""
    kw, special, weights = {}, set(), None
    names = {f.name: f for f in fields(sq.SequentialConfig)}
    for part in filter(None, spec.split("+")):
        if part in SPECIAL:
            special.add(part)
            continue
        if part == "default":
            continue
        key, _, val = part.partition("=")
        if key == "weights":
            weights = tuple(float(x) for x in np.atleast_1d(ast.literal_eval(val)))
            continue
        if key not in names:
            raise SystemExit(f"unknown SequentialConfig field in variant {spec!r}: {key}")
        v = np.inf if val == "off" else ast.literal_eval(val)
        kw[key] = type(getattr(DEFAULT, key))(v) if not isinstance(getattr(DEFAULT, key), tuple) else tuple(v)
    return replace(DEFAULT, **kw), special, weights


def replay_key(cfg: sq.SequentialConfig, special: set[str]) -> str:
    """The part of a variant its statistics depend on (a file name)."""
    diff = [f"{f.name}={getattr(cfg, f.name)}" for f in fields(cfg)
            if f.name not in RULE_ONLY and getattr(cfg, f.name) != getattr(DEFAULT, f.name)]
    return "+".join(sorted(special) + diff) or "base"


def true_noise_replay(corpus, start: int, cfg: sq.SequentialConfig, phi_only: bool = False):
    """``analytics.fleet_calibration.replay_stats`` (the product's replay) with the day's model's phi
    and innovation scale replaced by the simulator's (per series: sigma sqrt(1 - phi^2) sqrt((df - 2) / df));
    phi_only: only phi."""
    scale = corpus.sigma * np.sqrt(1 - corpus.phi**2) * np.sqrt((corpus.df - 2) / corpus.df)

    def known(rows_, model):
        true = {"phi": np.full(rows_.size, corpus.phi)}
        return replace(model, **(true if phi_only else {**true, "scale": scale[rows_]}))

    return fleet_calibration.replay_stats(corpus.values, start, cfg, model_hook=known)


def replay(corpus, cfg: sq.SequentialConfig, special: set[str]):
    if "oracle" in special:
        return rows.oracle_stats(corpus, det.HISTORY, cfg, clairvoyant=False)
    if special & {"true_noise", "true_phi"}:
        return true_noise_replay(corpus, det.HISTORY, cfg, phi_only="true_noise" not in special)
    return rows.product_stats(corpus.values, det.HISTORY, cfg)


def cached_stats(cache: str, tag: str, corpus_fn, cfg, special, wall: dict):
    """(runs, S, V, Z) of one replay setting on one corpus, from the cache or replayed and stored."""
    path = os.path.join(cache, f"{replay_key(cfg, special)}__{tag}.npz")
    if os.path.exists(path):
        d = np.load(path)
        return d["runs"], d["S"], d["V"].astype(float), d["Z"]
    t0 = time.perf_counter()
    runs, S, V, Z = replay(corpus_fn(), cfg, special)
    wall[f"{replay_key(cfg, special)} {tag}"] = time.perf_counter() - t0
    os.makedirs(cache, exist_ok=True)
    np.savez(path + ".tmp.npz", runs=runs, S=S, V=V.astype(np.uint8), Z=Z)
    os.replace(path + ".tmp.npz", path)
    return runs, S, V, Z


def probe(cfg: sq.SequentialConfig, thresholds) -> tuple[int, int]:
    """Alarms on tests/analytics/test_sequential.py's series (8 series, sigma 0.5 %, phi 0.35, t(4),
    seed 2) with one outlier hour of +8 %, +45 % or x3 at age 0, 1, 2, 5 (must be 0), and with two
    consecutive outlier hours of the same sizes ending at the same ages."""
    hist = cfg.fit_hours + cfg.reference_hours + cfg.max_window
    rng = np.random.default_rng(2)
    e = rng.standard_t(4, (8, hist)) * np.sqrt(0.5) * 0.005 * np.sqrt(1 - 0.35**2)
    u = np.zeros((8, hist))
    for t in range(1, hist):
        u[:, t] = 0.35 * u[:, t - 1] + e[:, t]
    base = 1000.0 * np.exp(u)
    hod = np.arange(hist) % 24
    one = two = 0
    for age in (0, 1, 2, 5):
        for size in (1.08, 1.45, 3.0):
            for width, acc in ((1, "one"), (2, "two")):
                v = base.copy()
                v[:, hist - age - width : hist - age] *= size
                n = int(sq.detect_hourly(v, hod, thresholds=thresholds, config=cfg).alarm.sum())
                one, two = (one + n, two) if acc == "one" else (one, two + n)
    return one, two


def evaluate(spec: str, args, corpora: dict, wall: dict) -> dict:
    cfg, special, weights = parse_variant(spec)
    cal, clean, steps = (cached_stats(args.cache, tag, fn, cfg, special, wall) for tag, fn in corpora.items())
    t0 = time.perf_counter()
    h, p, rate = rows.calibrate(*cal, args.target, cfg, **({} if weights is None else {"weights": weights}))
    a_clean = rows.alerts_from_stats(*clean, h, cfg)
    r = det.score(rows.alerts_from_stats(*steps, h, cfg), a_clean, corpora_steps(args), args.dev_clean_series)
    wall[f"{spec} calibration and scoring"] = time.perf_counter() - t0
    pr = probe(cfg, h) if not special else None
    return {"spec": spec, "cfg": cfg, "h": h, "p": p, "rate": rate, "r": r, "probe": pr}


_STEPS = {}


def corpora_steps(args):
    key = (args.dev_step_series, args.dev_step_seed)
    if key not in _STEPS:
        _STEPS[key] = det.corpus(args.dev_step_series, args.dev_step_seed, steps=True)
    return _STEPS[key]


def row(res: dict) -> str:
    r, kk = res["r"], res["r"]["k"]

    def c(k, w):
        return det.f2(kk.get(k, {}).get(w))

    on = [kk[x]["onset1"] for x in (3.0, 4.0, 6.0, 10.0) if x in kk]
    pr = "–" if res["probe"] is None else f"{res['probe'][0]} / {res['probe'][1]}"
    return (f"| {res['spec']} | {det.f2(r['fa'])} ({r['fp_clean']}) | {det.f2(r['precision'])} | "
            f"{c(3.0, 'r3')} / {c(3.0, 'r6')} / {c(3.0, 'r12')} | {c(4.0, 'r3')} / {c(4.0, 'r6')} | {c(6.0, 'r3')} | "
            f"{det.f2(min(on)) if on else '–'}–{det.f2(max(on)) if on else '–'} | {c(2.0, 'r3')} / {c(2.0, 'r6')} / {c(2.0, 'r12')} | {res['rate']:.2f} ({res['p']:.1e}) | {pr} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="default", help="';'-separated variants (see above)")
    ap.add_argument("--target", type=float, default=0.9, help="false alarms per 1,000 series-days (calibration)")
    ap.add_argument("--cal-series", type=int, default=12000, help="clean calibration series of seed 101")
    ap.add_argument("--dev-clean-seed", type=int, default=202)
    ap.add_argument("--dev-clean-series", type=int, default=8000)
    ap.add_argument("--dev-step-seed", type=int, default=201)
    ap.add_argument("--dev-step-series", type=int, default=2400)
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "early_recall_cache"))
    ap.add_argument("--replay-only", choices=("cal", "clean", "steps"), default=None,
                    help="only replay (and cache) this corpus for the variants: splits a long replay into runs")
    args = ap.parse_args(argv)
    if {args.dev_clean_seed, args.dev_step_seed} & {11, 12}:
        ap.error("seeds 11 and 12 are the detection benchmark's held-out seeds: not for choosing")
    corpora = {
        f"cal101x{args.cal_series}": lambda: det.corpus(args.cal_series, 101, steps=False),
        f"clean{args.dev_clean_seed}x{args.dev_clean_series}": lambda: det.corpus(args.dev_clean_series, args.dev_clean_seed, steps=False),
        f"steps{args.dev_step_seed}x{args.dev_step_series}": lambda: corpora_steps(args),
    }
    t_start, wall = time.perf_counter(), {}
    if args.replay_only:
        tag, fn = next((t, f) for t, f in corpora.items() if t.startswith(args.replay_only))
        for spec in filter(None, map(str.strip, args.variants.split(";"))):
            cached_stats(args.cache, tag, fn, *parse_variant(spec)[:2], wall)
        print(", ".join(f"{k} {v:.0f} s" for k, v in wall.items()) or "cached already")
        return 0
    results = [evaluate(spec.strip(), args, corpora, wall) for spec in args.variants.split(";") if spec.strip()]
    print(f"# Early recall: variants of the sequential detector (development seeds)\n\nmachine: {platform.platform()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} "
          f"UTC; wall {time.perf_counter() - t_start:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in wall.items()) + ")\n"
          f"command: `.venv/bin/python benchmarks/early_recall.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
          f"calibration: {args.cal_series:,} clean series of seed 101, target {args.target:g} / 1,000 series-days; "
          f"development: {args.dev_clean_series:,} clean series of seed {args.dev_clean_seed} = "
          f"{args.dev_clean_series * det.DAYS:,} series-days, {args.dev_step_series:,} step series of seed {args.dev_step_seed}.\n")
    print("| variant | dev false / 1,000 series-days (count) | precision | k=3σ within 3 / 6 / 12 | k=4σ within 3 / 6 | "
          "k=6σ within 3 | onset ±1 h (k ≥ 3) | k=2σ within 3 / 6 / 12 | in-sample rate (tail p) | outlier probe: 1 h / 2 h alarms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        print(row(res))
    print("\nthresholds (m = min_len..max_window):\n")
    for res in results:
        cfg = res["cfg"]
        print(f"- {res['spec']}: " + ", ".join(f"{x:.2f}" for x in np.asarray(res["h"])[cfg.min_len - 1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
