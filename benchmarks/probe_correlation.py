"""GPU probe: do CUPTI correlation IDs keep counting while the collector is detached?

The per-window kernel count scaled by ``sampling_duty`` undercounts by the program's slowdown while
traced (docs/benchmarks.md, issue 10 §4/§9). If the correlation ID of a kernel record comes from a
counter that advances on every CUDA API call, traced or not, then the gap between the last ID of one
on-phase and the first ID of the next *measures* how many API calls the program made while we were
away, and the count needs no pricing. This probe checks that on the GPU, for the two ways of pausing:
``cuptiFinalize`` (what the collector does) and disabling the activity kinds only.

    python3 benchmarks/probe_correlation.py --json out.json

Each phase runs ``--steps`` steps of ``--kernels`` tiny kernels (one torch op each). Prints, per
traced phase, the kernel count and the first/last correlation ID, and per untraced gap the ID gap
against the kernels launched in it.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--kernels", type=int, default=100)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch
    from cupti import cupti

    AK = cupti.ActivityKind
    x = torch.zeros(256, device="cuda")
    torch.cuda.synchronize()
    recs: list[tuple[int, int]] = []

    def requested():
        return 8 << 20, 0

    def completed(activities):
        for a in activities:
            if a.kind == AK.CONCURRENT_KERNEL:
                recs.append((a.correlation_id, a.start))

    def run_steps():
        for _ in range(args.steps):
            for _ in range(args.kernels):
                x.add_(1.0)
        torch.cuda.synchronize()

    def attach():
        cupti.activity_register_callbacks(requested, completed)
        cupti.activity_enable(AK.CONCURRENT_KERNEL)

    def drain_out(finalize: bool):
        cupti.activity_disable(AK.CONCURRENT_KERNEL)
        torch.cuda.synchronize()
        cupti.activity_flush_all(1)
        if finalize:
            cupti.finalize()

    def timed_steps() -> float:
        t0 = time.perf_counter()
        run_steps()
        return time.perf_counter() - t0

    def traced_phase(reattach: bool) -> float:
        """Seconds of one phase traced from a fresh attach (``reattach``) or by re-enabling the kind."""
        if reattach:
            attach()
        else:
            cupti.activity_enable(AK.CONCURRENT_KERNEL)
        recs.clear()
        return timed_steps()

    out: dict = {"steps": args.steps, "kernels_per_step": args.kernels, "phases": []}
    run_steps()  # warm-up, untraced
    for mode in ("finalize", "disable_only"):
        phases = []
        for i in range(3):
            wall = traced_phase(reattach=(mode == "finalize" or i == 0))
            drain_out(finalize=(mode == "finalize"))
            ids = sorted(r[0] for r in recs)
            phases.append({"label": f"{mode}-on{i}", "wall_s": wall, "kernels": len(ids),
                           "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None,
                           "id_span": (ids[-1] - ids[0] + 1) if ids else None,
                           "untraced_wall_s": timed_steps()})
        if mode == "disable_only":
            cupti.finalize()
        for a, b in zip(phases, phases[1:]):
            if a["last_id"] is not None and b["first_id"] is not None:
                a["gap_to_next"] = b["first_id"] - a["last_id"] - 1
                a["untraced_kernels"] = args.steps * args.kernels
        out["phases"] += phases
        for p in phases:
            print(json.dumps(p), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
