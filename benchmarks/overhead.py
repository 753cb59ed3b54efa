"""Collector overhead on real GPU workloads: no collector vs cudawatch vs torch.profiler.

Workloads (PyTorch, one GPU):
  launch  launch-bound loop of 100 tiny in-place adds then sync (~140k kernels/s untraced on the H200 host)
  mixed   10 x (2048x2048 fp32 matmul + relu + pinned 4 MiB host-to-device copy), then sync
  heavy   4 x 8192x8192x8192 bf16 matmuls, then sync

Each mode runs in its own process (CUPTI state is per process); modes alternate in a rotating
order, ``--reps`` times. Every workload first runs ``--warmup`` seconds untimed (the collector's
duty-cycle controller settles there: steady state), then ``--seconds`` timed. The summary gives,
per workload and mode, the ratio of median times per step (mode / no collector, over reps) with a
bootstrap 95 % interval (reps resampled with replacement, 2000 draws), the median of per-rep
ratios, and for cudawatch the collector's own estimate of its overhead in the timed part
(``est_overhead_pct``: estimated tracing cost of the on-phases plus measured detach/attach time,
over the timed seconds), which must agree with the measured ratio.

  python benchmarks/overhead.py run --reps 2 --json out.json --md out.md \
      --seconds launch=10,mixed=6,heavy=6 --warmup launch=2,mixed=12,heavy=6
  python benchmarks/overhead.py run --reps 3 --workloads launch ...   (more reps where the noise is)
  python benchmarks/overhead.py summarize a.json b.json --md out.md    (pool runs: reps add up per workload)
  python benchmarks/overhead.py worker --mode cudawatch                (one process, prints JSON)
  python benchmarks/overhead.py probe      (launch rate untraced / traced / after disable / after
                                            cuptiFinalize, and attach/finalize times; one process)

Modes: none; cudawatch (default settings: adaptive duty cycle under CUDAWATCH_MAX_OVERHEAD_PCT,
off-phases detach with cuptiFinalize); cudawatch_disable (off-phases only cuptiActivityDisable);
cudawatch_full (no duty cycling: every kernel traced); profiler (torch.profiler, CUDA activities only).
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

import gpu_workloads  # benchmarks/, the script's folder

WORKLOADS = ("launch", "mixed", "heavy")
MODES = ("none", "cudawatch", "cudawatch_disable", "cudawatch_full", "profiler")


def _workload(name: str):
    import torch

    dev = torch.device("cuda")
    if name == "launch":
        return gpu_workloads.launch_step(), 100
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


def _per_workload(spec: str | float, workloads: list[str]) -> dict[str, float]:
    """``"launch=10,mixed=6"`` or one number for all."""
    if isinstance(spec, (int, float)) or "=" not in str(spec):
        return {w: float(spec) for w in workloads}
    out = dict((k, float(v)) for k, v in (item.split("=") for item in str(spec).split(",") if item))
    missing = [w for w in workloads if w not in out]
    if missing:
        raise SystemExit(f"no time given for {missing} in {spec!r}")
    return out


def worker(mode: str, workloads: list[str], seconds, warmup_s) -> dict:
    session = None
    tmp = tempfile.mkdtemp(prefix="cw-bench-")
    seconds, warmup_s = _per_workload(seconds, workloads), _per_workload(warmup_s, workloads)
    if mode.startswith("cudawatch"):
        import collector

        opts = {"adaptive": mode != "cudawatch_full"}
        if mode == "cudawatch_disable":
            opts["off_mode"] = "disable"
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
        t_end = time.perf_counter() + warmup_s[w]
        while time.perf_counter() < t_end:
            step()
        t0 = time.time()
        log0 = len(session.duty_log) if session is not None else 0
        t_step, n = _time(step, seconds[w], 0.0)
        t1 = time.time()
        out["results"][w] = {"s_per_step": t_step, "steps": n, "kernels_per_s": kernels_per_step / t_step,
                             "seconds": seconds[w], "warmup_s": warmup_s[w]}
        if session is not None:
            log = [d for d in session.duty_log[log0:] if t0 <= d[0] <= t1 + 0.5]
            r = out["results"][w]
            r["control_periods"] = len(log)
            r["duty_mean"] = statistics.fmean(d[1] for d in log) if log else None
            r["est_on_fraction"] = statistics.fmean(d[2] for d in log) if log else None
            # the controller's view of what it cost: estimated on-phase cost plus measured cycles
            r["est_overhead_pct"] = 100 * sum(d[4] + d[5] for d in log) / (t1 - t0) if log else None
            r["cycle_s"] = statistics.fmean(d[5] for d in log) if log else None
            r["period_s"] = statistics.fmean(d[6] for d in log) if log else None
    if prof is not None:
        prof.__exit__(None, None, None)
    if session is not None:
        t, a = session.tracer, session.agg
        out["collector"] = {"records": a.records_total, "delivered": a.delivered_total, "invalid_zero_ts": a.invalid_zero_ts,
                            "invalid_order": a.invalid_order, "dropped": session.dropped_total, "errors": session.errors,
                            "callback_s": t.callback_s, "kernels": t.kernels,
                            "buffers": t.buffers_completed, "duty_final": session.controller.duty,
                            "callback_us_per_record": 1e6 * t.callback_s / max(t.kernels + t.copies, 1),
                            "in_path_overhead_s": t.overhead_ns * 1e-9,
                            "drain": t.drain.summary()}
        collector.stop()
        # read after stop(), as benchmarks/memory.py does: the counts include the exit detach
        out["collector"]["finalize"] = t.finalizer.summary()
    return out


def probe() -> dict:
    """Launch rate in one process: untraced, traced, after activity_disable, after cuptiFinalize; host
    buffers of the collector's default size (``collector.budget.DEFAULT_HOST_BUFFER``)."""
    from cupti import cupti

    from collector.budget import DEFAULT_HOST_BUFFER

    launches = gpu_workloads.launch_step()

    def rate(sec=1.0):
        return gpu_workloads.launch_rate(launches, sec)

    kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET, cupti.ActivityKind.OVERHEAD]
    count = [0]

    def attach():
        cupti.activity_register_callbacks(lambda: (DEFAULT_HOST_BUFFER, 0), lambda acts: count.__setitem__(0, count[0] + len(acts)))
        for k in kinds:
            cupti.activity_enable(k)

    rate(0.5)
    res = {"host_buffer_bytes": DEFAULT_HOST_BUFFER, "untraced_per_s": rate()}
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


def run_interleaved(script: str, reps: int, modes: list[str], args: list[str], describe, checkpoint: str | None = None,
                    meta: dict | None = None) -> list[dict]:
    """``reps`` rounds of one worker process per mode, the order rotating each round
    (``python script worker --mode M *args``, its JSON on the last stdout line); each result gets
    its ``rep`` and ``describe(mode, result)`` is printed. With ``checkpoint`` the runs so far (and
    ``meta``) are written there after every worker, so a run cut short by a device limit keeps its
    finished reps."""
    runs = []
    for rep in range(reps):
        for mode in modes[rep % len(modes):] + modes[: rep % len(modes)]:
            p = subprocess.run([sys.executable, script, "worker", "--mode", mode, *args], capture_output=True, text=True,
                               env=os.environ.copy())
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"worker {mode} failed with {p.returncode}")
            res = json.loads(p.stdout.strip().splitlines()[-1])
            res["rep"] = rep
            runs.append(res)
            if checkpoint:
                with open(checkpoint, "w") as fh:
                    json.dump({"runs": runs, "reps_done": rep, **(meta or {})}, fh)
            print(f"rep {rep} {mode}: {describe(mode, res)}", file=sys.stderr, flush=True)
    return runs


def run(reps: int, seconds, warmup_s, modes: list[str], workloads: list[str], checkpoint: str | None = None) -> dict:
    """Interleaved reps (``run_interleaved``)."""
    def describe(mode: str, res: dict) -> str:
        return (", ".join(f"{w} {r['s_per_step']*1e3:.3f} ms" for w, r in res["results"].items())
                + (f" est {[round(r.get('est_overhead_pct') or 0, 2) for r in res['results'].values()]}"
                   if mode.startswith("cudawatch") else ""))
    runs = run_interleaved(__file__, reps, modes, ["--seconds", str(seconds), "--warmup", str(warmup_s),
                                                   "--workloads", ",".join(workloads)], describe, checkpoint,
                           {"seconds": seconds, "warmup": warmup_s})
    return {"runs": runs, "summary": summarize(runs), "reps": reps, "seconds": seconds, "warmup": warmup_s,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _bootstrap_ratio(mode_t: list[float], base_t: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of median(mode) / median(base), reps resampled (paired) with replacement."""
    import random

    rng = random.Random(seed)
    n = len(mode_t)
    stats = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(statistics.median(mode_t[i] for i in idx) / statistics.median(base_t[i] for i in idx))
    stats.sort()
    return stats[int(0.025 * draws)], stats[int(0.975 * draws) - 1]


def summarize(runs: list[dict]) -> dict:
    """Per workload and mode: ratio of medians + bootstrap 95 % interval, per-rep ratios, estimate."""
    summary = {}
    groups = {}
    for r in runs:
        groups.setdefault((r.get("source", ""), r["rep"]), {})[r["mode"]] = r
    reps = [g for g in groups.values() if "none" in g]
    workloads = sorted({w for r in runs for w in r["results"]}, key=lambda w: WORKLOADS.index(w) if w in WORKLOADS else 99)
    modes = [m for m in MODES if any(m in g for g in reps)]
    for w in workloads:
        for mode in modes:
            pairs = [(g[mode]["results"][w]["s_per_step"], g["none"]["results"][w]["s_per_step"], g[mode]["results"][w])
                     for g in reps if mode in g and w in g[mode]["results"] and w in g["none"]["results"]]
            if not pairs:
                continue
            mt, bt = [p[0] for p in pairs], [p[1] for p in pairs]
            entry = {"reps": len(pairs), "ratio_of_medians": statistics.median(mt) / statistics.median(bt),
                     "median_ratio": statistics.median(m / b for m, b in zip(mt, bt)), "ratios": [m / b for m, b in zip(mt, bt)],
                     "base_ms": [b * 1e3 for b in bt]}
            if len(pairs) >= 2:
                entry["ci95"] = _bootstrap_ratio(mt, bt)
            ests = [p[2].get("est_overhead_pct") for p in pairs if p[2].get("est_overhead_pct") is not None]
            if ests:
                entry["est_overhead_pct_median"] = statistics.median(ests)
                entry["duty_mean"] = statistics.median(p[2]["duty_mean"] for p in pairs if p[2].get("duty_mean") is not None)
            summary.setdefault(w, {})[mode] = entry
    return summary


def markdown(result: dict) -> str:
    summary = result["summary"]
    modes = [m for m in MODES if any(m in per for per in summary.values())]
    lines = ["| workload | reps | " + " | ".join(f"{m} (ratio of medians, 95 % CI)" for m in modes) + " | cudawatch estimate | duty |",
             "|---|---|" + "---|" * len(modes) + "---|---|"]
    for w, per in summary.items():
        cells = []
        for m in modes:
            e = per.get(m)
            if e is None:
                cells.append("–")
            else:
                ci = f" ({e['ci95'][0]:.3f}–{e['ci95'][1]:.3f})" if "ci95" in e else ""
                cells.append(f"{e['ratio_of_medians']:.3f}{ci}")
        cw = per.get("cudawatch", {})
        est = f"{1 + cw['est_overhead_pct_median'] / 100:.3f}" if "est_overhead_pct_median" in cw else "–"
        duty = f"{cw['duty_mean']:.3f}" if cw.get("duty_mean") is not None else "–"
        reps = max(e["reps"] for e in per.values())
        lines.append(f"| {w} | {reps} | " + " | ".join(cells) + f" | {est} | {duty} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--mode", choices=MODES, required=True)
    sub.add_parser("probe")
    r = sub.add_parser("run")
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--modes", default="none,cudawatch,profiler")
    r.add_argument("--json")
    r.add_argument("--md")
    for p in (w, r):
        p.add_argument("--seconds", default="launch=10,mixed=6,heavy=6", help="timed seconds: one number or w=s,...")
        p.add_argument("--warmup", default="launch=2,mixed=12,heavy=6", help="untimed seconds before each workload")
        p.add_argument("--workloads", default=",".join(WORKLOADS))
    sm = sub.add_parser("summarize")
    sm.add_argument("files", nargs="+")
    sm.add_argument("--md")
    sm.add_argument("--json")
    a = ap.parse_args()
    if a.cmd == "probe":
        print(json.dumps(probe()))
        return
    if a.cmd == "summarize":
        runs = []
        for f in a.files:
            for r_ in json.load(open(f))["runs"]:
                runs.append({**r_, "source": f})
        result = {"runs": runs, "summary": summarize(runs)}
    else:
        workloads = [x for x in a.workloads.split(",") if x]
        if a.cmd == "worker":
            print(json.dumps(worker(a.mode, workloads, a.seconds, a.warmup)))
            return
        result = run(a.reps, a.seconds, a.warmup, [m for m in a.modes.split(",") if m], workloads,
                     checkpoint=a.json + ".partial" if a.json else None)
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
