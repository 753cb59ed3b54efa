"""Collector overhead on real GPU workloads: no collector vs cudawatch vs torch.profiler.

Workloads (PyTorch, one GPU):
  launch  launch-bound loop of tiny in-place adds (about 95k kernels/s on an H200 host)
  mixed   2048x2048 fp32 matmul + relu + pinned 4 MiB host-to-device copy, sync every 10 steps
  heavy   8192x8192x8192 bf16 matmuls, sync every 4 steps

Each mode runs in its own process (CUPTI state is per process), modes alternate in a rotating
order, ``--reps`` times; the table reports the median over reps of each mode's time per step
divided by the no-collector time per step of the same rep (a ratio of 1.02 = 2 % slower).

  python benchmarks/overhead.py run --reps 5 --seconds 2 --json out.json --md out.md
  python benchmarks/overhead.py worker --mode cudawatch --seconds 2     (one process, prints JSON)
  python benchmarks/overhead.py probe      (launch rate untraced / traced / after disable / after
                                            cuptiFinalize, and attach/finalize times; one process)

Modes: none, cudawatch (default settings: adaptive duty cycle under CUDAWATCH_MAX_OVERHEAD_PCT,
off-phases use cuptiActivityDisable), cudawatch_detach (off-phases cuptiFinalize and re-attach),
cudawatch_full (no duty cycling: every kernel traced), profiler (torch.profiler, CUDA activities only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("launch", "mixed", "heavy")
MODES = ("none", "cudawatch", "cudawatch_detach", "cudawatch_full", "profiler")


def _workload(name: str):
    import torch

    dev = torch.device("cuda")
    if name == "launch":
        x = torch.zeros(16, device=dev)

        def step():
            for _ in range(100):
                x.add_(1.0)
            torch.cuda.synchronize()

        return step, 100
    if name == "mixed":
        a = torch.randn(2048, 2048, device=dev)
        b = torch.randn(2048, 2048, device=dev)
        host = torch.randn(1024, 1024).pin_memory()
        dst = torch.empty(1024, 1024, device=dev)

        def step():
            for _ in range(10):
                c = torch.relu(a @ b)
                dst.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            return c

        return step, 30
    if name == "heavy":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def step():
            for _ in range(4):
                c = a @ b
            torch.cuda.synchronize()
            return c

        return step, 4
    raise ValueError(f"unknown workload {name!r}; choose from {WORKLOADS}")


def _time(step, seconds: float, warmup_s: float) -> tuple[float, int]:
    t_end = time.perf_counter() + warmup_s
    while time.perf_counter() < t_end:
        step()
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return el / n, n


def worker(mode: str, workloads: list[str], seconds: float, warmup_s: float) -> dict:
    session = None
    tmp = tempfile.mkdtemp(prefix="cw-bench-")
    if mode.startswith("cudawatch"):
        import collector

        opts = {"adaptive": mode != "cudawatch_full"}
        if mode == "cudawatch_detach":
            opts["off_mode"] = "detach"
        session = collector.start(job="overhead-bench", out=tmp, **opts)
        if not session.active:
            raise SystemExit(f"collector did not start: {session.reason}")
    import torch

    torch.cuda.init()
    prof = None
    if mode == "profiler":
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
    out = {"mode": mode, "results": {}}
    for w in workloads:
        step, kernels_per_step = _workload(w)
        t_step, n = _time(step, seconds, warmup_s)
        out["results"][w] = {"s_per_step": t_step, "steps": n, "kernels_per_s": kernels_per_step / t_step}
        if session is not None:
            log = [d for d in session.duty_log if d[0] >= time.time() - seconds]
            out["results"][w]["duty_mean"] = statistics.fmean(d[1] for d in log) if log else None
            out["results"][w]["est_on_fraction"] = statistics.fmean(d[2] for d in log) if log else None
            out["results"][w]["est_overhead_pct"] = 100 * sum(d[4] for d in log) / seconds if log else None
            out["results"][w]["cycle_s"] = statistics.fmean(d[5] for d in log) if log else None
            out["results"][w]["period_s"] = statistics.fmean(d[6] for d in log) if log else None
    if prof is not None:
        prof.__exit__(None, None, None)
    if session is not None:
        t = session.tracer
        out["collector"] = {"records": session.agg.records_total, "callback_s": t.callback_s, "kernels": t.kernels,
                            "buffers": t.buffers_completed, "duty_final": session.controller.duty,
                            "callback_us_per_record": 1e6 * t.callback_s / max(t.kernels + t.copies, 1),
                            "in_path_overhead_s": t.overhead_ns * 1e-9}
        collector.stop()
    return out


def probe() -> dict:
    """Launch rate in one process: untraced, traced, after activity_disable, after cuptiFinalize."""
    import torch
    from cupti import cupti

    x = torch.zeros(16, device="cuda")

    def rate(sec=1.0):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < sec:
            for _ in range(100):
                x.add_(1)
            torch.cuda.synchronize()
            n += 100
        return n / (time.perf_counter() - t0)

    kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET, cupti.ActivityKind.OVERHEAD]
    count = [0]

    def attach():
        cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda acts: count.__setitem__(0, count[0] + len(acts)))
        for k in kinds:
            cupti.activity_enable(k)

    rate(0.5)
    res = {"untraced_per_s": rate()}
    t0 = time.perf_counter()
    attach()
    res["attach_s"] = time.perf_counter() - t0
    res["traced_per_s"] = rate()
    for k in kinds:
        cupti.activity_disable(k)
    cupti.activity_flush_all(1)
    res["after_disable_per_s"] = rate()
    t0 = time.perf_counter()
    cupti.finalize()
    res["finalize_s"] = time.perf_counter() - t0
    res["after_finalize_per_s"] = rate()
    cycles = []
    for _ in range(5):
        t0 = time.perf_counter()
        attach()
        rate(0.05)
        cupti.activity_flush_all(1)
        for k in kinds:
            cupti.activity_disable(k)
        cupti.finalize()
        cycles.append(time.perf_counter() - t0 - 0.05)
    res["attach_finalize_cycle_s"] = cycles
    res["records"] = count[0]
    return res


def run(reps: int, seconds: float, warmup_s: float, modes: list[str], workloads: list[str]) -> dict:
    runs = []
    for rep in range(reps):
        order = modes[rep % len(modes):] + modes[: rep % len(modes)]
        for mode in order:
            cmd = [sys.executable, __file__, "worker", "--mode", mode, "--seconds", str(seconds), "--warmup", str(warmup_s),
                   "--workloads", ",".join(workloads)]
            p = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"worker {mode} failed with {p.returncode}")
            res = json.loads(p.stdout.strip().splitlines()[-1])
            res["rep"] = rep
            runs.append(res)
            print(f"rep {rep} {mode}: " + ", ".join(f"{w} {r['s_per_step']*1e3:.3f} ms" for w, r in res["results"].items()), file=sys.stderr)
    summary = {}
    for w in workloads:
        for mode in modes:
            ratios = []
            for rep in range(reps):
                base = next(r for r in runs if r["rep"] == rep and r["mode"] == "none")["results"][w]["s_per_step"]
                this = next(r for r in runs if r["rep"] == rep and r["mode"] == mode)["results"][w]["s_per_step"]
                ratios.append(this / base)
            summary.setdefault(w, {})[mode] = {"median_ratio": statistics.median(ratios), "ratios": ratios}
    return {"runs": runs, "summary": summary, "reps": reps, "seconds": seconds}


def markdown(result: dict) -> str:
    modes = list(next(iter(result["summary"].values())))
    lines = ["| workload | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for w, per in result["summary"].items():
        lines.append(f"| {w} | " + " | ".join(f"{per[m]['median_ratio']:.3f}" for m in modes) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--mode", choices=MODES, required=True)
    sub.add_parser("probe")
    r = sub.add_parser("run")
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--json")
    r.add_argument("--md")
    for p in (w, r):
        p.add_argument("--seconds", type=float, default=2.0)
        p.add_argument("--warmup", type=float, default=0.5)
        p.add_argument("--workloads", default=",".join(WORKLOADS))
    a = ap.parse_args()
    if a.cmd == "probe":
        print(json.dumps(probe()))
        return
    workloads = [x for x in a.workloads.split(",") if x]
    if a.cmd == "worker":
        print(json.dumps(worker(a.mode, workloads, a.seconds, a.warmup)))
        return
    result = run(a.reps, a.seconds, a.warmup, [m for m in a.modes.split(",") if m], workloads)
    md = markdown(result)
    print(md)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md + "\n")


if __name__ == "__main__":
    main()
