"""GPU probe: can an idle process skip the cuptiFinalize cycle, and what would skipping cost?

An idle process (an inference server without traffic) cycles like a busy one and keeps ~0.586 MiB of
GPU memory per cuptiFinalize (docs/collector.md, "Staying on for days"). Skipping the finalize after
an on-phase that traced nothing needs a signal, before the detach, that nothing was traced; a forced
flush while attached is not one (it strips timestamps). The candidate: CUPTI asks for a host buffer
(the tracer's ``buffers_requested``) only when it has a record to store. This probe checks, with the
product's ``collector.tracer.CuptiTracer`` and its traced kinds:

  1. ``requested``: buffers requested after an attach with no CUDA work for ``--idle-s``, after CUDA
     calls that launch nothing (``synchronize``, a pinned host allocation) and after an unforced
     flush (the candidate needs 0 at all of these); then after one kernel launch, read at once, after
     ``--idle-s`` and after an unforced flush, which is when the collector would read it (it needs
     more than before the launch at that last reading).
  2. ``memory``: the process's GPU memory (nvidia-smi) and RSS over ``--cycles`` idle disable/enable
     rounds that never finalize, then over as many idle attach/detach rounds that do (the known
     GPU leak), in the same process. One attach on a busy LM kept GPU memory flat but grew RSS 4.6
     MiB a minute (docs/benchmarks.md §21); whether an idle one grows is the question here.
  3. ``launch``: launches a second on the launch-bound loop detached and attached with the kinds
     disabled (what a process that stayed attached through its idle time would pay once work comes
     back, until its next on-phase), ``--reps`` times alternating, each for ``--launch-s`` seconds;
     each attached sample against the mean of its two detached neighbours (the loop's untraced rate
     drifts within a run, §22).

    python3 benchmarks/probe_idle.py --json probe_idle.json

Prints one JSON line per part and writes them all to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import gpu_workloads  # benchmarks/, the script's folder: the launch-bound loop and RSS
import soak


def gpu_mib(pid: int) -> int | None:
    """This process's GPU memory in MiB as nvidia-smi reports it (None when it is not listed)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    series = soak.parse_gpumem(out).get(pid)
    return series[-1] if series else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=2.0)
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--launch-s", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from collector.aggregate import Aggregator
    from collector.tracer import CuptiTracer

    one_launch = gpu_workloads.launch_step(1)  # one add, then a synchronize
    loop = gpu_workloads.launch_step()  # the launch-bound loop of the overhead benchmarks
    torch.cuda.synchronize()
    pid = os.getpid()
    tracer = CuptiTracer(Aggregator(window_s=60))
    out: dict = {"pid": pid}

    def report(name: str, part: dict) -> None:
        out[name] = part
        print(json.dumps({name: part}), flush=True)

    # 1. Does CUPTI ask for a buffer before it has a record?
    req = {}
    tracer.attach()
    req["after_attach"] = tracer.buffers_requested
    time.sleep(args.idle_s)
    req["after_idle"] = tracer.buffers_requested
    torch.cuda.synchronize()
    torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
    req["after_calls_without_launch"] = tracer.buffers_requested
    tracer.flush(force=False)
    req["after_unforced_flush"] = tracer.buffers_requested
    one_launch()
    req["after_one_launch"] = tracer.buffers_requested
    time.sleep(args.idle_s)
    req["after_one_launch_and_idle"] = tracer.buffers_requested
    tracer.flush(force=False)
    req["after_one_launch_and_unforced_flush"] = tracer.buffers_requested
    tracer.detach()
    req["records_of_the_launch"] = tracer.kernels
    req["idle_s"] = args.idle_s
    req["signal_works"] = (req["after_unforced_flush"] == 0
                           and req["after_one_launch_and_unforced_flush"] > req["after_unforced_flush"])
    report("requested", req)

    # 2. GPU memory and RSS: idle rounds that keep CUPTI attached (disable/enable) against rounds that finalize.
    mem: dict = {"cycles": args.cycles}
    tracer.attach()
    mem["keep_attached_mib"], mem["keep_attached_rss_mib"] = [gpu_mib(pid)], [gpu_workloads.rss_mib()]
    for _ in range(args.cycles):
        tracer.disable()
        time.sleep(0.02)
        tracer.enable()
        time.sleep(0.02)
    mem["keep_attached_mib"].append(gpu_mib(pid))
    mem["keep_attached_rss_mib"].append(gpu_workloads.rss_mib())
    mem["keep_attached_requested"] = tracer.buffers_requested
    tracer.detach()
    finalizes0 = tracer.finalizes
    mem["finalize_mib"], mem["finalize_rss_mib"] = [gpu_mib(pid)], [gpu_workloads.rss_mib()]
    for _ in range(args.cycles):
        tracer.attach()
        time.sleep(0.02)
        tracer.detach()
    mem["finalize_mib"].append(gpu_mib(pid))
    mem["finalize_rss_mib"].append(gpu_workloads.rss_mib())
    mem["finalizes_in_finalize_rounds"] = tracer.finalizes - finalizes0
    for k in ("keep_attached_mib", "finalize_mib"):
        a, b = mem[k]
        mem[k.replace("_mib", "_per_cycle_mib")] = None if a is None or b is None else (b - a) / args.cycles
    report("memory", mem)

    # 3. Launch rate attached with the kinds disabled, each sample between two detached ones.
    def rate() -> float:
        return gpu_workloads.launch_rate(loop, args.launch_s)

    rate()  # warm-up
    detached, attached = [rate()], []
    for _ in range(args.reps):
        tracer.attach()
        tracer.disable()
        attached.append(rate())
        tracer.detach()
        detached.append(rate())
    costs = [(detached[i] + detached[i + 1]) / 2 / a - 1 for i, a in enumerate(attached)]
    report("launch", {"detached_per_s": detached, "attached_disabled_per_s": attached,
                      "attached_disabled_cost": costs, "launch_s": args.launch_s})

    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
