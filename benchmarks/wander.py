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
import json
import statistics
import sys
from pathlib import Path

import numpy as np

BLOCKS = (1, 2, 3, 6, 12, 30)
MIN_BLOCKS = 3  # a variance across fewer block means says nothing


def load_windows(root: Path, min_launches: int) -> dict[tuple, np.ndarray]:
    """Series key -> array (windows, 3) of launches, total_ns, sumsq_ns2, in time order; only
    windows with at least ``min_launches`` launches."""
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
    for *key, _, n, tot, ss in rows:
        if n >= min_launches and ss is not None:
            series.setdefault(tuple(key), []).append((n, tot, ss))
    return {k: np.array(v) for k, v in series.items()}


def block_stats(w: np.ndarray, k: int) -> tuple[float, float, float] | None:
    """(observed variance of block means, mean predicted variance, grand mean) for blocks of ``k``
    consecutive windows; None with fewer than MIN_BLOCKS blocks."""
    nb = len(w) // k
    if nb < MIN_BLOCKS:
        return None
    b = w[: nb * k].reshape(nb, k, 3).sum(axis=1)
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="shard root (holds kernels/) or a folder of kernel shards")
    ap.add_argument("--min-launches", type=int, default=50, help="windows with fewer launches are left out")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    res = summarize(load_windows(a.root, a.min_launches))
    print(f"{res['series']} series; ratio = observed / sampling-predicted variance of block means")
    print("| windows per block | series | ratio median (q1–q3) | excess sd % of mean, median / q3 |")
    print("|---|---|---|---|")
    for r in res["by_block"]:
        print(f"| {r['windows_per_block']} | {r['series']} | {r['ratio_median']} ({r['ratio_q1']}–{r['ratio_q3']}) | "
              f"{r['excess_pct_median']} / {r['excess_pct_q3']} |")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
