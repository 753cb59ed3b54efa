"""The program's last detach with kernels still queued on the GPU: what the never-fence rule costs.

  python benchmarks/final_detach.py --json final_detach.json [--queue-s 1.0] [--burst 20000]

The collector never fences the program's last detach (``collector.drain``: its context may be going
away under the poll), so records of kernels still queued when ``collector.stop()`` runs may come back
without timestamps (counted, ``invalid_zero_timestamp``) or not at all. Every run before this one
stopped an idle GPU (``memory.py`` synchronizes first; docs/benchmarks.md §19). Here the collector
runs in-process with its traced fraction pinned at 1, so CUPTI stays attached from its second period
on; then, all on one stream:

1. ``--pre`` launches of a kernel used nowhere else (``bitwise_xor_`` on an int16 tensor), synchronized:
   traced while attached, they show that the kernel is found in the shards;
2. a spin kernel (``torch.cuda._sleep``) holding the stream for ``--queue-s`` seconds, calibrated here;
3. ``--burst`` more xor launches queued behind it, and ``collector.stop()`` at once, while the GPU is
   still busy (checked: ``in_flight_at_stop``), then a synchronize.

It reports the xor launches the shards hold against ``pre + burst``, the records without
timestamps, dropped and delivered, the drain's counts (``final`` 1: the last detach ran attached)
and how long ``stop()`` took. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gpu_workloads  # noqa: E402  (benchmarks/)

MARK = "xor"  # the marker kernel's name holds this (at::native::BitwiseXorFunctor<short>), in any case


def marker_launches(root) -> dict[str, int]:
    """Launches per kernel name holding ``MARK`` in the kernel shards under ``root``."""
    from cudawatch.shards import list_shards, read_shard

    out: dict[str, int] = {}
    for f in list_shards(root, "kernels"):
        for r in read_shard(f).select(["kernel", "launches"]).to_pylist():
            if MARK in r["kernel"].lower():
                out[r["kernel"]] = out.get(r["kernel"], 0) + r["launches"]
    return out


def spin_cycles_per_s() -> float:
    """GPU clock cycles ``torch.cuda._sleep`` spins per second, timed on this device."""
    import torch

    torch.cuda._sleep(10_000_000)  # load the kernel
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(200_000_000)
    torch.cuda.synchronize()
    return 200_000_000 / (time.perf_counter() - t0)


def run(queue_s: float, burst: int, pre: int, warm_s: float) -> dict:
    import torch

    import collector

    cycles_per_s = spin_cycles_per_s()
    root = Path(tempfile.mkdtemp(prefix="cw-final-"))
    session = collector.start(job="final-detach", out=root)
    if not session.active:
        raise SystemExit(f"collector did not start: {session.reason}")
    gpu_workloads.pin_duty(session, 1.0)
    x = torch.zeros(16, device="cuda")
    marker = torch.zeros(16, dtype=torch.int16, device="cuda")
    t_end = time.monotonic() + warm_s  # past the first period, which ran at the controller's start duty
    while time.monotonic() < t_end or not session.tracer.attached:
        for _ in range(100):
            x.add_(1.0)
        torch.cuda.synchronize()
        if time.monotonic() > t_end + 60:
            raise SystemExit(f"the collector is not attached {warm_s + 60:.0f} s after its start "
                             f"(errors {session.errors}, drain {session.tracer.drain.summary()})")
    detaches_before = session.tracer.drain.detaches
    for _ in range(pre):
        marker.bitwise_xor_(1)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    torch.cuda._sleep(int(queue_s * cycles_per_s))
    t_launch = time.perf_counter()
    for _ in range(burst):
        marker.bitwise_xor_(1)
    launch_s = time.perf_counter() - t_launch
    attached_at_stop = session.tracer.attached
    in_flight = not stream.query()
    t_stop = time.perf_counter()
    collector.stop()
    stop_s = time.perf_counter() - t_stop
    in_flight_after_stop = not stream.query()
    torch.cuda.synchronize()
    found = marker_launches(root)
    traced = sum(found.values())
    expected = pre + burst
    res = {"queue_s": queue_s, "burst": burst, "pre": pre, "spin_cycles_per_s": cycles_per_s,
           "burst_launch_s": launch_s, "attached_at_stop": attached_at_stop,
           "detaches_before_burst": detaches_before, "in_flight_at_stop": in_flight,
           "in_flight_after_stop": in_flight_after_stop, "stop_s": stop_s,
           "marker_kernels": found,  # empty: the marker's name is not as MARK expects (not a loss) "marker_traced": traced, "marker_expected": expected,
           "marker_missing": expected - traced,
           "records_delivered": session.agg.delivered_total, "invalid_zero_timestamp": session.agg.invalid_zero_ts,
           "dropped": session.dropped_total, "errors": session.errors, "drain": session.tracer.drain.summary(),
           "finalize": session.tracer.finalizer.summary(), "device": torch.cuda.get_device_name()}
    # the burst was queued while attached, still running at the stop, and the stop's detach was the only one after it
    res["valid_run"] = bool(found and attached_at_stop and in_flight
                            and detaches_before == session.tracer.drain.detaches - 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue-s", type=float, default=1.0, help="seconds the spin kernel holds the stream")
    ap.add_argument("--burst", type=int, default=20_000, help="marker launches queued behind it")
    ap.add_argument("--pre", type=int, default=1_000, help="marker launches traced before, synchronized")
    ap.add_argument("--warm-s", type=float, default=40.0, help="seconds before the marker (past the first period)")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.queue_s, a.burst, a.pre, a.warm_s)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
