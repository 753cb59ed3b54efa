"""The program's last detach with kernels still queued on the GPU: are their records kept?

  python benchmarks/final_detach.py --json final_detach.json [--queue-s 1.0] [--burst 500]

Records of kernels still queued when the last detach force-flushes come back without timestamps
(counted, ``invalid_zero_timestamp``) and are lost for good. Until 2026-12-07 the collector never
fenced that detach, and on an H100 a stop with this script's queue lost all 501 (docs/benchmarks.md
§21); it now fences it with the longer bound ``collector.drain.FINAL_MAX_S``.
``CUDAWATCH_DETACH_DRAIN=adaptive`` (no fence) is the control. Every run before §21 stopped an idle GPU
(``memory.py`` synchronizes first). Here the collector runs in-process with its traced fraction pinned at 1, so CUPTI stays attached from its second period
on; then, all on one stream:

1. ``--pre`` launches of a kernel used nowhere else (``bitwise_xor_`` on an int16 tensor), synchronized:
   traced while attached, they show that the kernel is found in the shards;
2. a spin kernel (``torch.cuda._sleep``) holding the stream for ``--queue-s`` seconds, calibrated here;
3. ``--burst`` more xor launches queued behind it (fewer than CUDA's launch queue holds, so the host
   never blocks and every one is still queued; a ``burst_launch_s`` near ``queue_s`` says it
   blocked), and ``collector.stop()`` at once, while the spin kernel still runs (checked with an
   event recorded after it: ``spin_running_at_stop``), then a synchronize.

It reports the xor launches the shards hold against ``pre + burst``, the records without
timestamps and delivered, the drain's counts (``fence.final_fenced`` 1: the last detach fenced; §21's
JSON has ``final``, which in its first run, before the change, counted a last detach that did not), how long
``stop()`` took and ``valid_run`` (``summarize``). Drops CUPTI reports at the last detach are not
seen (the session reads them only while attached); a missing marker launch shows in the count.
Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gpu_workloads  # benchmarks/, the script's folder

MARK = "xor"  # the marker kernel's name holds this (at::native::BitwiseXorFunctor<short>), in any case


def marker_launches(root) -> dict[str, int]:
    """Launches per kernel name holding ``MARK`` (in any case) in the kernel shards under ``root``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cudawatch.shards import list_shards, read_shard

    tables = [read_shard(f).select(["kernel", "launches"]) for f in list_shards(root, "kernels")]
    if not tables:
        return {}
    t = pa.concat_tables(tables)
    t = t.filter(pc.match_substring(pc.utf8_lower(t["kernel"]), MARK)).group_by("kernel").aggregate([("launches", "sum")])
    return dict(zip(t["kernel"].to_pylist(), t["launches_sum"].to_pylist()))


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
    step = gpu_workloads.launch_step()
    marker = torch.zeros(16, dtype=torch.int16, device="cuda")
    t_end = time.monotonic() + warm_s  # past the first period, which ran at the controller's start duty
    while time.monotonic() < t_end or not session.tracer.attached:
        step()
        if time.monotonic() > t_end + 60:
            raise SystemExit(f"the collector is not attached {warm_s + 60:.0f} s after its start "
                             f"(errors {session.errors}, drain {session.tracer.drain.summary()})")
    detaches_before = session.tracer.drain.detaches
    for _ in range(pre):
        marker.bitwise_xor_(1)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    spin_done = torch.cuda.Event()
    torch.cuda._sleep(int(queue_s * cycles_per_s))
    spin_done.record(stream)
    t_launch = time.perf_counter()
    for _ in range(burst):
        marker.bitwise_xor_(1)
    launch_s = time.perf_counter() - t_launch
    attached_at_stop = session.tracer.attached
    spin_running_at_stop = not spin_done.query()
    t_stop = time.perf_counter()
    collector.stop()
    stop_s = time.perf_counter() - t_stop
    spin_running_after_stop = not spin_done.query()
    torch.cuda.synchronize()
    obs = {"queue_s": queue_s, "burst": burst, "pre": pre, "spin_cycles_per_s": cycles_per_s,
           "burst_launch_s": launch_s, "attached_at_stop": attached_at_stop,
           "detaches_before_burst": detaches_before, "detaches_after_stop": session.tracer.drain.detaches,
           "spin_running_at_stop": spin_running_at_stop, "spin_running_after_stop": spin_running_after_stop,
           "stop_s": stop_s, "marker_kernels": marker_launches(root),
           "records_delivered": session.agg.delivered_total, "invalid_zero_timestamp": session.agg.invalid_zero_ts,
           # drops CUPTI reports by the last detach are not seen: the session reads them only while attached
           "dropped_before_final_detach": session.dropped_total, "errors": session.errors,
           "drain": session.tracer.drain.summary(), "finalize": session.tracer.finalizer.summary(),
           "device": torch.cuda.get_device_name()}
    return summarize(obs)


def summarize(obs: dict) -> dict:
    """The run's observations plus what they mean: marker launches traced, expected and missing, and
    ``valid_run``: the marker was found in the shards, the collector was attached at the stop, the
    spin kernel was still running when ``stop()`` began (so every burst launch was queued behind it
    while the last detach ran), and that detach was the only one after the burst."""
    traced = sum(obs["marker_kernels"].values())
    expected = obs["pre"] + obs["burst"]
    valid = bool(obs["marker_kernels"] and obs["attached_at_stop"] and obs["spin_running_at_stop"]
                 and obs["detaches_after_stop"] == obs["detaches_before_burst"] + 1)
    return {**obs, "marker_traced": traced, "marker_expected": expected, "marker_missing": expected - traced,
            "valid_run": valid}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue-s", type=float, default=1.0, help="seconds the spin kernel holds the stream")
    ap.add_argument("--burst", type=int, default=500,
                    help="marker launches queued behind it; keep it below the depth of CUDA's launch queue (about a thousand "
                         "entries, not measured here) so none blocks: burst_launch_s says whether one did")
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
