"""Collector overhead measured inside one process: untraced and traced phases alternating (issue 10).

Why: ``benchmarks/overhead.py`` runs each mode in its own process, and on the launch-bound loop the
untraced time per step itself moves by up to 24 % from one process to the next (docs/benchmarks.md
§5, §8; pinning to 8 cores did not help). With the collector tracing 0.7 % of the time, that spread
is the whole interval: 20 reps give 0.96–1.07. Here every process is its own baseline:

  settle  ``--settle`` seconds untimed, untraced: the process's own warm-up. The first run of the
          one-cycle design (§9 of docs/benchmarks.md, H100) sped up 8 % between its first and last
          30 s, so the first timed phase must come after that.
  A0 B1 A1 B2 A2 ...  ``--cycles`` traced phases B, each between two untraced phases A, every phase
      ``--seconds`` timed (after ``--warmup`` untimed). B is the mode under test: ``cudawatch``
      (``collector.start`` with default settings) or ``profiler`` (torch.profiler, CUDA activities),
      started before its phase's warm-up (the duty-cycle controller settles) and stopped after it
      (``collector.stop`` / profiler exit). Keep ``--seconds`` at least the collector's control
      period (30 s) so every B holds whole on-phases.

Per B phase, ``ratio = B / baseline``, the baseline interpolated between its two neighbouring A
phases at B's midpoint in time (a drift that is linear over three phases cancels, even when a stop
takes long); per process the mean over its B phases, and ``after_stop`` = last A / first A (what stays
after the stops — CUPTI's launch path after ``cuptiFinalize`` — plus drift). Modes alternate over
processes; both modes run under the same rules. The summary gives per workload and mode the median
ratio with a bootstrap 95 % interval over processes, and the median ``after_stop``. An ``after_stop``
above 1 means the A phases are not a clean baseline: then ``B / A0`` (also reported) is the
comparison to read, with drift not cancelled. One workload per process: a second one's A0 would run
after CUPTI had been attached and finalized. With 4–8 processes the percentile bootstrap of a median
covers somewhat less than 95 %. Results of the one-cycle layout (keys ``a1/b/a2_s_per_step``) are
still read.

  python benchmarks/overhead_paired.py run --reps 3 --cycles 2 --settle 30 --modes cudawatch,profiler \\
      --workload launch --seconds 30 --warmup 3 --json paired.json     # ~3 min per process
  python benchmarks/overhead_paired.py summarize paired.json [more.json ...]
  python benchmarks/overhead_paired.py worker --mode cudawatch --workload launch    (one process, JSON)
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time

import overhead  # benchmarks/, the script's folder: the same workloads and timing loop

MODES = ("cudawatch", "profiler")


def _start(mode: str):
    """Start the mode under test; returns a function that stops it and returns its counters."""
    if mode == "cudawatch":
        import collector

        session = collector.start(job="overhead-paired", out=tempfile.mkdtemp(prefix="cw-paired-"))
        if not session.active:
            raise SystemExit(f"collector did not start: {session.reason}")

        def stop() -> dict:
            log = list(session.duty_log)
            collector.stop()
            return {"duty_mean": statistics.fmean(d[1] for d in log) if log else None,
                    "records": session.agg.records_total, "invalid_zero_ts": session.agg.invalid_zero_ts,
                    "errors": session.errors, "finalize": session.tracer.finalizer.summary(),
                    "drain": session.tracer.drain.summary()}  # detaches, waits, fence waits/timeouts
        return stop
    import torch

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    prof.__enter__()

    def stop() -> dict:
        prof.__exit__(None, None, None)
        return {}
    return stop


def _phase(step, seconds: float, warmup_s: float) -> tuple[float, int, float]:
    """(seconds per step, steps, midpoint of the timed part on perf_counter), after a collection."""
    gc.collect()
    t_step, n = overhead._time(step, seconds, warmup_s)
    return t_step, n, time.perf_counter() - t_step * n / 2


def worker(mode: str, workload: str, seconds: float, warmup_s: float, cycles: int = 1, settle_s: float = 0.0) -> dict:
    if mode not in MODES:
        raise SystemExit(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if cycles < 1:
        raise SystemExit(f"--cycles must be at least 1, got {cycles}")
    import torch

    torch.cuda.init()
    step = overhead._workload(workload)[0]
    overhead._time(step, 0.0, settle_s)
    a, b, counters = [_phase(step, seconds, warmup_s)], [], []
    for _ in range(cycles):
        stop = _start(mode)
        try:
            b.append(_phase(step, seconds, warmup_s))
        finally:
            counters.append(stop())
            del stop  # the profiler's parsed events are not kept alive through the next A
        a.append(_phase(step, seconds, 0.0))
    return {"mode": mode, "results": {workload: {
        "a_s_per_step": [x[0] for x in a], "b_s_per_step": [x[0] for x in b],
        "a_mid_s": [x[2] for x in a], "b_mid_s": [x[2] for x in b], "steps": [x[1] for x in a + b],
        "seconds": seconds, "warmup_s": warmup_s, "settle_s": settle_s, "counters": counters}}}


def _phases(r: dict) -> tuple[list[float], list[float], list[float]]:
    """(A times, B times, each B's position between its neighbouring A midpoints), either layout."""
    if "a1_s_per_step" in r:  # the one-cycle layout: A1 B A2
        return [r["a1_s_per_step"], r["a2_s_per_step"]], [r["b_s_per_step"]], [r.get("b_position", 0.5)]
    am, bm = r["a_mid_s"], r["b_mid_s"]
    return r["a_s_per_step"], r["b_s_per_step"], [(bm[i] - am[i]) / (am[i + 1] - am[i]) for i in range(len(bm))]


def per_process(r: dict) -> dict:
    """The within-process ratios of one worker's result for one workload: each B against the
    baseline interpolated at its position between its neighbouring A phases, averaged over the B
    phases; B against the first A only; and last A over first A."""
    a, b, pos = _phases(r)
    ratios = [b[i] / (a[i] + (a[i + 1] - a[i]) * pos[i]) for i in range(len(b))]
    return {"ratio": statistics.fmean(ratios), "ratio_vs_a1": statistics.fmean(b) / a[0], "after_stop": a[-1] / a[0],
            "phase_ratios": ratios}


def _bootstrap_median(xs: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the median of ``xs`` (processes resampled with replacement)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choice(xs) for _ in xs) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def summarize(runs: list[dict]) -> dict:
    """Per workload and mode: median within-process ratio with its bootstrap 95 % interval, the same
    against A1 only, the median after-stop ratio, and the spread of the untraced baseline (A1)."""
    out: dict = {}
    for mode in MODES:
        for w in sorted({w for r in runs if r["mode"] == mode for w in r["results"]}):
            rows = [per_process(r["results"][w]) for r in runs if r["mode"] == mode and w in r["results"]]
            base = [_phases(r["results"][w])[0][0] * 1e3 for r in runs if r["mode"] == mode and w in r["results"]]
            e = {"processes": len(rows), "ratio": statistics.median(x["ratio"] for x in rows),
                 "ratio_vs_a1": statistics.median(x["ratio_vs_a1"] for x in rows),
                 "after_stop": statistics.median(x["after_stop"] for x in rows),
                 "a1_ms_min_max": [min(base), max(base)], "ratios": [x["ratio"] for x in rows]}
            if len(rows) >= 2:
                e["ci95"] = _bootstrap_median([x["ratio"] for x in rows])
                e["ci95_vs_a1"] = _bootstrap_median([x["ratio_vs_a1"] for x in rows])
            out.setdefault(w, {})[mode] = e
    return out


def markdown(summary: dict) -> str:
    lines = ["| workload | mode | processes | B / baseline at B (neighbouring A), median (95 % CI) | B / first A (95 % CI) | last A / first A | untraced ms per step, min–max |",
             "|---|---|---|---|---|---|---|"]
    for w, per in summary.items():
        for mode, e in per.items():
            ci = f" ({e['ci95'][0]:.3f}–{e['ci95'][1]:.3f})" if "ci95" in e else ""
            ci1 = f" ({e['ci95_vs_a1'][0]:.3f}–{e['ci95_vs_a1'][1]:.3f})" if "ci95_vs_a1" in e else ""
            lo, hi = e["a1_ms_min_max"]
            lines.append(f"| {w} | {mode} | {e['processes']} | {e['ratio']:.3f}{ci} | {e['ratio_vs_a1']:.3f}{ci1} | "
                         f"{e['after_stop']:.3f} | {lo:.3f}–{hi:.3f} |")
    return "\n".join(lines)


def run(reps: int, modes: list[str], workload: str, seconds: float, warmup_s: float, checkpoint: str | None,
        cycles: int = 1, settle_s: float = 0.0) -> dict:
    """``reps`` processes per mode, modes alternating; finished processes are kept in ``checkpoint``."""
    def describe(mode: str, res: dict) -> str:
        return ", ".join(f"{w} {per_process(r)['ratio']:.3f} (last A / first A {per_process(r)['after_stop']:.3f})"
                         for w, r in res["results"].items())
    runs = overhead.run_interleaved(__file__, reps, modes, ["--workload", workload, "--seconds", str(seconds),
                                                            "--warmup", str(warmup_s),
                                                            "--cycles", str(cycles), "--settle", str(settle_s)], describe, checkpoint)
    return {"runs": runs, "summary": summarize(runs), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("worker", "run"):
        p = sub.add_parser(name)
        p.add_argument("--workload", default="launch", choices=overhead.WORKLOADS)
        p.add_argument("--seconds", type=float, default=30.0)
        p.add_argument("--warmup", type=float, default=3.0)
        p.add_argument("--cycles", type=int, default=2, help="traced phases per process, each between two untraced ones")
        p.add_argument("--settle", type=float, default=30.0, help="untimed untraced seconds before the first phase")
        if name == "worker":
            p.add_argument("--mode", required=True)
        else:
            p.add_argument("--reps", type=int, default=8)
            p.add_argument("--modes", default=",".join(MODES))
            p.add_argument("--json")
    sm = sub.add_parser("summarize")
    sm.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.cmd == "worker":
        print(json.dumps(worker(a.mode, a.workload, a.seconds, a.warmup, a.cycles, a.settle)))
    elif a.cmd == "run":
        res = run(a.reps, a.modes.split(","), a.workload, a.seconds, a.warmup,
                  a.json + ".partial" if a.json else None, a.cycles, a.settle)
        print(markdown(res["summary"]))
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(res, fh, indent=1)
    else:
        runs = [r for f in a.files for r in json.load(open(f))["runs"]]
        print(markdown(summarize(runs)))


if __name__ == "__main__":
    main()
