"""Is a real kernel's time noise sampling noise, or wander? (issue 15, sub-hourly structure)

Reads the kernel shards a real capture wrote (``cudawatch collect`` with short windows, e.g.
``CUDAWATCH_WINDOW_S=10``) and, for every kernel series (job, GPU, kernel, launch configuration)
with enough launches, compares how much its mean time moves between blocks of k consecutive
windows with what sampling alone predicts from the launches inside them (the within-block
variance over the launches, from the shard's ``sumsq_ns2``):

    ratio(k)  = variance of the block means across blocks / mean predicted variance of a block mean
    excess(k) = sqrt(max(0, observed - predicted)) / mean, in percent (the wander at that scale)

Windows with fewer than ``--min-launches`` launches are left out, so a block is k consecutive
*kept* windows (a gap in a capture joins the windows on either side of it). The predicted variance
at k > 1 pools the launches of the whole block around the block's mean, so level changes inside a
block count as sampling noise there: ``excess(k)`` is a lower bound of the wander at that scale.

Independent launches give ratio ~ 1 at every k. Wander (the level itself moving: clocks, thermals,
contention, input mix) makes the ratio grow with k, because sampling noise shrinks as blocks hold
more launches and wander does not. The simulator assumes the second at the hourly scale
(docs/detection.md, "The simulator's noise against real captures"); a capture of minutes shows
what happens up to minutes, not hour to hour.

    python benchmarks/wander.py SHARD_ROOT [--min-launches 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import numpy as np

BLOCKS = (1, 2, 3, 6, 12, 30)
MIN_BLOCKS = 3  # a variance across fewer block means says nothing


def load_windows(root: Path, min_launches: int) -> dict[tuple, np.ndarray]:
    """Series key -> array (windows, 4) of launches, total_ns, sumsq_ns2 and the window's start (unix
    seconds), in time order; only windows with at least ``min_launches`` launches."""
    import duckdb

    files = sorted(str(p) for p in (root / "kernels").rglob("*.parquet")) if (root / "kernels").is_dir() \
        else sorted(str(p) for p in root.rglob("*.parquet"))
    if not files:
        raise SystemExit(f"no kernel shards under {root}")
    rows = duckdb.sql(
        "SELECT job, gpu_uuid, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, window_start, "
        "sum(launches)::DOUBLE, sum(total_ns)::DOUBLE, sum(sumsq_ns2) "
        "FROM read_parquet(?, union_by_name = true) GROUP BY ALL ORDER BY ALL", params=[files]).fetchall()
    series: dict[tuple, list] = {}
    for *key, start, n, tot, ss in rows:
        if n >= min_launches and ss is not None:
            series.setdefault(tuple(key), []).append((n, tot, ss, start.timestamp()))
    return {k: np.array(v) for k, v in series.items()}


def block_stats(w: np.ndarray, k: int) -> tuple[float, float, float] | None:
    """(observed variance of block means, mean predicted variance, grand mean) for blocks of ``k``
    consecutive windows; None with fewer than MIN_BLOCKS blocks."""
    nb = len(w) // k
    if nb < MIN_BLOCKS:
        return None
    b = w[: nb * k, :3].reshape(nb, k, 3).sum(axis=1)
    n, tot, ss = b[:, 0], b[:, 1], b[:, 2]
    mean = tot / n
    var_launch = np.maximum(ss / n - mean**2, 0.0)
    return float(np.var(mean, ddof=1)), float(np.mean(var_launch / n)), float(np.mean(mean))


def summarize(series: dict[tuple, np.ndarray]) -> dict:
    out = {"series": len(series), "by_block": []}
    for k in BLOCKS:
        ratios, excess = [], []
        for w in series.values():
            s = block_stats(w, k)
            if s is None or s[1] <= 0:
                continue
            obs, pred, mean = s
            ratios.append(obs / pred)
            excess.append(100.0 * np.sqrt(max(0.0, obs - pred)) / mean)
        if not ratios:
            continue
        q = np.percentile(ratios, [25, 50, 75])
        out["by_block"].append({"windows_per_block": k, "series": len(ratios),
                                "ratio_median": round(float(q[1]), 3), "ratio_q1": round(float(q[0]), 3),
                                "ratio_q3": round(float(q[2]), 3),
                                "excess_pct_median": round(statistics.median(excess), 4),
                                "excess_pct_q3": round(float(np.percentile(excess, 75)), 4)})
    return out


def common_mode(series: dict[tuple, np.ndarray], shuffles: int = 200, seed: int = 0) -> dict | None:
    """Do a capture's kernels move together from window to window? Over the series present in every
    common window (the window starts of at least 80 % of the series, the first and last of them,
    partial, left out; series with no spread left out too), the pairwise correlation of their window
    log-means, and the share of the standardized variance in the first principal component against
    the same with each series' windows shuffled (what independent series give). None without
    window starts (column 3) or with fewer than 3 such series."""
    if not series or next(iter(series.values())).shape[1] < 4:
        return None
    seen = collections.Counter(s for w in series.values() for s in set(w[:, 3]))
    starts = sorted(s for s, c in seen.items() if c >= 0.8 * len(series))[1:-1]
    full = [w for w in series.values() if set(starts) <= set(w[:, 3])]
    d = np.array([np.log(w[np.isin(w[:, 3], starts), 1] / w[np.isin(w[:, 3], starts), 0]) for w in full]).reshape(len(full), -1)
    d = d[d.std(axis=1) > 1e-12] if d.size else d
    if d.shape[0] < 3 or d.shape[1] < 3:
        return None
    d = (d - d.mean(axis=1, keepdims=True)) / d.std(axis=1, keepdims=True)
    corr = np.corrcoef(d)[np.triu_indices(d.shape[0], 1)]

    def pc1(x: np.ndarray) -> float:
        s = np.linalg.svd(x, compute_uv=False)
        return float(s[0] ** 2 / np.sum(s**2))
    rng = np.random.default_rng(seed)
    null = [pc1(np.array([rng.permutation(r) for r in d])) for _ in range(shuffles)]
    return {"series": d.shape[0], "windows": d.shape[1], "corr_median": round(float(np.median(corr)), 3),
            "corr_q1": round(float(np.percentile(corr, 25)), 3), "corr_q3": round(float(np.percentile(corr, 75)), 3),
            "pc1_share": round(pc1(d), 3), "pc1_share_shuffled_p95": round(float(np.percentile(null, 95)), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="shard root (holds kernels/) or a folder of kernel shards")
    ap.add_argument("--min-launches", type=int, default=50, help="windows with fewer launches are left out")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    series = load_windows(a.root, a.min_launches)
    res = summarize(series)
    res["common_mode"] = common_mode(series)
    print(f"{res['series']} series; ratio = observed / sampling-predicted variance of block means")
    print("| windows per block | series | ratio median (q1–q3) | excess sd % of mean, median / q3 |")
    print("|---|---|---|---|")
    for r in res["by_block"]:
        print(f"| {r['windows_per_block']} | {r['series']} | {r['ratio_median']} ({r['ratio_q1']}–{r['ratio_q3']}) | "
              f"{r['excess_pct_median']} / {r['excess_pct_q3']} |")
    if res["common_mode"]:
        c = res["common_mode"]
        print(f"common mode over {c['series']} series in all {c['windows']} inner windows: pairwise correlation median "
              f"{c['corr_median']} (q1 {c['corr_q1']}, q3 {c['corr_q3']}); first principal component {c['pc1_share']:.0%} "
              f"of the variance (shuffled windows, 95th percentile: {c['pc1_share_shuffled_p95']:.0%})")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
