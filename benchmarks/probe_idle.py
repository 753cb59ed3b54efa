"""GPU probe: can an idle process skip the cuptiFinalize cycle, and what would skipping cost?

An idle process (an inference server without traffic) cycles like a busy one and keeps ~0.586 MiB of
GPU memory per cuptiFinalize (docs/collector.md, "Staying on for days"). Skipping the finalize after
an on-phase that traced nothing needs a signal, before the detach, that nothing was traced; a forced
flush while attached is not one (it strips timestamps). The candidate: CUPTI asks for a host buffer
(the tracer's ``buffers_requested``) only when it has a record to store. This probe checks, with the
product's ``collector.tracer.CuptiTracer`` and its traced kinds:

  1. ``requested``: buffers requested after an attach with no CUDA work for ``--idle-s`` (the
     candidate needs 0), after CUDA calls that launch nothing (``synchronize``, a host allocation),
     and after one kernel launch (it needs at least 1, before any flush).
  2. ``memory``: the process's GPU memory (nvidia-smi) over ``--cycles`` idle disable/enable rounds
     that never finalize, then over as many idle attach/detach rounds that do (the known leak), in
     the same process.
  3. ``launch``: launches a second on the launch-bound loop detached, attached with the kinds
     disabled (what a process that stayed attached through its idle time would pay for one period
     once work comes back) and traced, each for ``--launch-s`` seconds.

    python3 benchmarks/probe_idle.py --json probe_idle.json

Prints one JSON line per part and writes them all to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time


def gpu_mib(pid: int) -> int | None:
    """This process's GPU memory in MiB as nvidia-smi reports it (None when it is not listed)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p, used = (x.strip() for x in line.split(","))
        if int(p) == pid:
            return int(used)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=2.0)
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--launch-s", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from collector.aggregate import Aggregator
    from collector.tracer import CuptiTracer

    x = torch.zeros(256, device="cuda")
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
    x.add_(1.0)
    torch.cuda.synchronize()
    req["after_one_launch"] = tracer.buffers_requested
    tracer.detach()
    req["records_of_the_launch"] = tracer.kernels
    req["idle_s"] = args.idle_s
    req["signal_works"] = (req["after_calls_without_launch"] == 0 and req["after_one_launch"] >= 1)
    report("requested", req)

    # 2. GPU memory: idle rounds that keep CUPTI attached (disable/enable) against rounds that finalize.
    mem: dict = {"cycles": args.cycles}
    tracer.attach()
    mem["keep_attached_mib"] = [gpu_mib(pid)]
    for _ in range(args.cycles):
        tracer.disable()
        time.sleep(0.02)
        tracer.enable()
        time.sleep(0.02)
    mem["keep_attached_mib"].append(gpu_mib(pid))
    mem["keep_attached_requested"] = tracer.buffers_requested
    tracer.detach()
    mem["finalize_mib"] = [gpu_mib(pid)]
    for _ in range(args.cycles):
        tracer.attach()
        time.sleep(0.02)
        tracer.detach()
    mem["finalize_mib"].append(gpu_mib(pid))
    mem["finalizes"] = tracer.finalizes
    for k in ("keep_attached_mib", "finalize_mib"):
        a, b = mem[k]
        mem[k.replace("_mib", "_per_cycle_mib")] = None if a is None or b is None else (b - a) / args.cycles
    report("memory", mem)

    # 3. Launch rate: detached, attached with the kinds disabled, traced.
    def rate() -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.launch_s:
            for _ in range(100):
                x.add_(1.0)
            n += 100
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)

    rate()  # warm-up
    launch = {"detached_per_s": rate()}
    tracer.attach()
    tracer.disable()
    launch["attached_disabled_per_s"] = rate()
    tracer.enable()
    launch["traced_per_s"] = rate()
    tracer.detach()
    launch["detached_again_per_s"] = rate()
    launch["attached_disabled_cost"] = launch["detached_per_s"] / launch["attached_disabled_per_s"] - 1
    report("launch", launch)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
