"""Joint tests across one job's kernels (issue 15): does a test of a job's series together, at a
common onset, add recall at the same false-alarm rate?

A deploy or a library upgrade moves many of a job's kernels at once, each by a step that may be
too small to alarm alone. The joint statistic of a group of G series is the sum over its members of
the product's sequential statistic at the same onset, each clipped at 0 (the GLR of "some members
stepped up by at least the floor at this onset": a member that did not move adds nothing), with the
members' reference rises pooled as one z (mean z x sqrt(G)). Two detectors, calibrated on the same
clean groups and measured on other clean groups (another seed):

- ``individual``: the product's per-series rule, thresholds for the whole ``--target``;
- ``individual + joint``: per-series thresholds for half the target and joint thresholds for the
  other half (a joint alert counts once, as the one incident it would be).

Recall is measured per event within 3 / 6 / 12 hourly runs, with the product's onset match (±3 h):
``deploy`` (every member steps by k sigma of its own noise, k sigma within 2..20 %), ``half`` (half
of the members step) and ``single`` (one member steps: what the joint test's half of the budget
costs). An alert on any member of the group placed at the onset finds the event.

What the answer depends on is how the members' hourly noise co-moves, which no capture here shows
(docs/detection.md, "The simulator's noise against real captures": 10-s windows of one job's kernels
correlate at median 0.01; hour to hour is unmeasured). ``--rho`` mixes a common part into each
group's AR noise: the members' innovations correlate at rho. The corpus is
``simulator.corpus.make_corpus`` (the detection benchmark's noise: AR(1) t(4), daily cycle, drift,
outlier hours), 16 days of history, then 7 days of hourly runs through
``analytics.fleet_calibration.replay_stats`` (the product's hourly path).

    python benchmarks/joint_test.py --rho 0,0.5 --clean-groups 600 --event-groups 80 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics import fleet_calibration as fc  # noqa: E402
from analytics import sequential as sq  # noqa: E402
from benchmarks import detection_rows as rows  # noqa: E402
from benchmarks.detection import HISTORY, HOURS, MATCH_H, ONSETS  # noqa: E402,F401  the detection benchmark's protocol
from simulator.corpus import make_corpus  # noqa: E402

CFG = sq.SequentialConfig()


def group_values(n_groups: int, g: int, seed: int, rho: float, *, sigma_range=(0.003, 0.03)) -> tuple[np.ndarray, np.ndarray]:
    """(n_groups * g, HOURS) clean series, members of a group consecutive; their AR noise mixed so
    members' innovations correlate at ``rho``. Returns (values, sigma)."""
    c = make_corpus(n_groups * g, hours=HOURS, seed=seed, step_fraction=0.0, improvement_fraction=0.0,
                    onset_range=ONSETS, sigma_range=sigma_range)
    ar = np.log(c.values) - c.mean_log - c.outlier_log
    if rho > 0:  # a common factor per group: the standardized AR noise of another draw of the same law
        f = make_corpus(n_groups, hours=HOURS, seed=seed + 1_000_003, step_fraction=0.0, improvement_fraction=0.0,
                        onset_range=ONSETS, outlier_p=0.0)
        common = (np.log(f.values) - f.mean_log) / f.sigma[:, None]
        z = (ar / c.sigma[:, None]).reshape(n_groups, g, HOURS)
        z = math.sqrt(rho) * common[:, None, :] + math.sqrt(1.0 - rho) * z
        ar = z.reshape(n_groups * g, HOURS) * c.sigma[:, None]
    return np.exp(c.mean_log + ar + c.outlier_log), c.sigma


def with_steps(values: np.ndarray, sigma: np.ndarray, g: int, k: float, seed: int, members: str):
    """Step up every member (``deploy``), the first half (``half``) or the first member only
    (``single``) of each group by k sigma at a common onset per group. Returns (values, onset per group)."""
    rng = np.random.default_rng(seed)
    n_groups = values.shape[0] // g
    onset = rng.integers(ONSETS[0], ONSETS[1] + 1, n_groups)
    v = values.copy()
    for q in range(n_groups):
        rows = range(q * g, q * g + {"deploy": g, "half": max(1, g // 2), "single": 1}[members])
        for i in rows:
            v[i, onset[q]:] *= 1.0 + k * sigma[i]
    return v, onset


def joint(S, V, Z, g: int):
    """Group statistics: sum of members' statistics clipped at 0; valid hours the least over the
    members the path tested (an untested member adds nothing and blocks nothing); reference rise
    the members' mean z times sqrt(g)."""
    n, R, M = S.shape
    Sg = np.maximum(np.nan_to_num(S, neginf=0.0), 0.0).reshape(n // g, g, R, M).sum(axis=1)
    Vg = np.where(np.isneginf(S), np.inf, V).reshape(n // g, g, R, M).min(axis=1)
    Vg = np.where(np.isinf(Vg), 0.0, Vg)
    Zg = np.nan_to_num(Z, neginf=0.0).reshape(n // g, g, R, M).mean(axis=1) * math.sqrt(g)
    return Sg, Vg, Zg


def first_hit(alert_lists, onset: int) -> float:
    """Runs from onset to the first alert placed within ±MATCH_H of it (inf: none)."""
    best = math.inf
    for al in alert_lists:
        for a_onset, run in al:
            if abs(a_onset - onset) <= MATCH_H:
                best = min(best, run - onset + 1)
    return best


def run_rho(rho: float, args) -> dict:
    g, t0 = args.group, time.time()
    out: dict = {"rho": rho, "group": g, "target": args.target}
    stats = {}
    for name, seed in (("calib", args.seed), ("check", args.seed + 1)):
        v, _ = group_values(args.clean_groups, g, seed, rho)
        stats[name] = fc.replay_stats(v, HISTORY, CFG)
    runs, S, V, Z = stats["calib"]
    th_all, th_half = (np.asarray(rows.calibrate(runs, S, V, Z, t, CFG)[0]) for t in (args.target, args.target / 2))
    # the joint statistics count the member series' days, as the per-series ones do
    th_joint = np.asarray(rows.calibrate(runs, *joint(S, V, Z, g), args.target / 2, CFG,
                                         series_days=S.shape[0] * runs.size / 24)[0])
    out["thresholds"] = {"individual": th_all.tolist(), "individual_half": th_half.tolist(), "joint_half": th_joint.tolist()}
    runs, S, V, Z = stats["check"]
    days = S.shape[0] * runs.size / 24
    n_all = sum(len(a) for a in rows.alerts_from_stats(runs, S, V, Z, th_all, CFG))
    n_half = sum(len(a) for a in rows.alerts_from_stats(runs, S, V, Z, th_half, CFG))
    n_joint = sum(len(a) for a in rows.alerts_from_stats(runs, *joint(S, V, Z, g), th_joint, CFG))
    out["false_per_1000"] = {"individual": 1000 * n_all / days, "individual+joint": 1000 * (n_half + n_joint) / days,
                             "joint_part": 1000 * n_joint / days, "series_days": days}
    out["recall"] = {}
    for members, ks in (("deploy", args.deploy_k), ("half", args.half_k), ("single", args.single_k)):
        for j, k in enumerate(ks):
            lo, hi = max(0.003, 0.02 / k), min(0.03, 0.20 / k)
            v, sig = group_values(args.event_groups, g, args.seed + 10 + 7 * j + {"deploy": 0, "half": 50, "single": 100}[members], rho,
                                  sigma_range=(lo, hi))
            v, onset = with_steps(v, sig, g, k, args.seed + 1000 + j, members)
            runs, S, V, Z = fc.replay_stats(v, HISTORY, CFG)
            ind_all, ind_half = rows.alerts_from_stats(runs, S, V, Z, th_all, CFG), rows.alerts_from_stats(runs, S, V, Z, th_half, CFG)
            jo = rows.alerts_from_stats(runs, *joint(S, V, Z, g), th_joint, CFG)
            t_a, t_b = [], []
            for q in range(args.event_groups):
                mem = slice(q * g, (q + 1) * g)  # an alert on any member placed at the onset finds the event
                t_a.append(first_hit(ind_all[mem], onset[q]))
                t_b.append(min(first_hit(ind_half[mem], onset[q]), first_hit([jo[q]], onset[q])))
            t_a, t_b = np.asarray(t_a), np.asarray(t_b)
            out["recall"][f"{members} k={k:g}"] = {
                "groups": args.event_groups,
                "individual": [float((t_a <= r).mean()) for r in (3, 6, 12)],
                "individual+joint": [float((t_b <= r).mean()) for r in (3, 6, 12)]}
    out["wall_s"] = time.time() - t0
    return out


def table(results: list[dict]) -> str:
    lines = ["| rho | false / 1,000 series-days: individual; individual + joint (joint part) | event | recall within 3 / 6 / 12 runs: individual | individual + joint |",
             "|---|---|---|---|---|"]
    for r in results:
        fa = r["false_per_1000"]
        fa_s = f"{fa['individual']:.2f}; {fa['individual+joint']:.2f} ({fa['joint_part']:.2f})"
        for i, (ev, rec) in enumerate(r["recall"].items()):
            a = " / ".join(f"{x:.2f}" for x in rec["individual"])
            b = " / ".join(f"{x:.2f}" for x in rec["individual+joint"])
            lines.append(f"| {r['rho'] if i == 0 else ''} | {fa_s if i == 0 else ''} | {ev} ({rec['groups']} groups) | {a} | {b} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rho", default="0,0.5", help="comma-separated correlations of the members' innovations")
    ap.add_argument("--group", type=int, default=8, help="series per group (a job's kernels)")
    ap.add_argument("--clean-groups", type=int, default=600, help="clean groups for calibration, and as many to check")
    ap.add_argument("--event-groups", type=int, default=80, help="groups per event kind and k")
    ap.add_argument("--deploy-k", default="1,1.5,2,3")
    ap.add_argument("--half-k", default="1.5,2,3", help="half of each group's members step (empty: none)")
    ap.add_argument("--single-k", default="3,4,6")
    ap.add_argument("--target", type=float, default=0.9, help="false alerts per 1,000 series-days")
    ap.add_argument("--seed", type=int, default=7100)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rhos = [float(r) for r in args.rho.split(",")]
    if not all(0.0 <= r <= 1.0 for r in rhos) or args.group < 2:
        ap.error(f"--rho values must lie in [0, 1] (got {args.rho}) and --group be at least 2 (got {args.group})")
    args.deploy_k = [float(x) for x in args.deploy_k.split(",")]
    args.single_k = [float(x) for x in args.single_k.split(",")]
    args.half_k = [float(x) for x in args.half_k.split(",") if x]
    results = [run_rho(r, args) for r in rhos]
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
