"""Real per-window noise of kernel durations on a GPU: is it sampling noise or wander?

Times three workloads (a bf16 GEMM, a memory-bound elementwise kernel and a launch-bound tiny
kernel) round-robin for ``--seconds`` with CUDA events (one event pair per launch), then summarises
each workload's per-launch durations in 10-second windows, as the collector's windows do:

- window-mean CV: spread of the windows' mean duration (relative);
- sampling CV: what independent launches would give, median over windows of sd / mean / sqrt(n);
- lag-1 autocorrelation of the window means (0 for independent windows; > 0 for wander);
- variance ratio: var of 60-s block means x 6 / var of 10-s window means (1 for independent
  windows, > 1 when the level wanders on minute scales).

    python3 benchmarks/window_noise.py --seconds 300 --out window_noise.json    # needs a CUDA GPU

docs/detection.md compares the result with the simulator's noise model.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def workloads(torch):
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    x = torch.randn(64 * 1024 * 1024, device=dev)
    y = torch.empty_like(x)
    s = torch.randn(1024, device=dev)
    t = torch.empty_like(s)
    return {
        "gemm_bf16_4096": lambda: torch.matmul(a, b),
        "elementwise_64M": lambda: torch.mul(x, 2.0, out=y),
        "tiny_1k": lambda: torch.add(s, 1.0, out=t),
    }


def run(seconds: float, batch: int = 50) -> dict:
    import torch

    fns = workloads(torch)
    for f in fns.values():  # warm-up
        for _ in range(20):
            f()
    torch.cuda.synchronize()
    rec: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for name, f in fns.items():
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)]
            for e0, e1 in ev:
                e0.record()
                f()
                e1.record()
            torch.cuda.synchronize()
            now = time.perf_counter() - start
            rec[name] += [(now, e0.elapsed_time(e1) * 1e6) for e0, e1 in ev]  # ns
    return {"device": torch.cuda.get_device_name(0), "seconds": seconds, "summary": {k: summarise(v) for k, v in rec.items()}}


def summarise(rows, window_s: float = 10.0, block: int = 6) -> dict:
    t = np.array([r[0] for r in rows])
    d = np.array([r[1] for r in rows])
    w = (t // window_s).astype(int)
    keys = np.unique(w)[:-1]  # the last window is partial
    means = np.array([d[w == k].mean() for k in keys])
    samp = np.array([d[w == k].std() / d[w == k].mean() / np.sqrt((w == k).sum()) for k in keys])
    z = means - means.mean()
    ac1 = float((z[1:] * z[:-1]).sum() / (z * z).sum()) if z.size > 2 else float("nan")
    nb = means.size // block
    blocks = means[: nb * block].reshape(nb, block).mean(axis=1)
    ratio = float(blocks.var() * block / means.var()) if nb > 2 else float("nan")
    q = np.quantile(d, [0.5, 0.9, 0.99])
    return {"launches": int(d.size), "windows": int(means.size), "mean_ns": float(d.mean()),
            "window_mean_cv": float(means.std() / means.mean()), "sampling_cv": float(np.median(samp)),
            "lag1_autocorr": ac1, "variance_ratio_60s": ratio, "p50_ns": float(q[0]), "p90_over_p50": float(q[1] / q[0]),
            "p99_over_p50": float(q[2] / q[0]), "share_above_2x_median": float((d > 2 * q[0]).mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--out", default="window_noise.json")
    args = ap.parse_args(argv)
    res = run(args.seconds)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
