"""The collector's own session, without CUPTI, at a soak's record rate: does its memory grow?

The LM soaks on the GPU (docs/benchmarks.md §4, §9, §14) grow 0.56-0.99 MiB a minute after their
first minutes, and it is open whether that is the collector's. This runs the product's whole
session (``collector.start()``: duty controller, on/off cycles, windows, health notes, spool,
hourly rotation, the ``.status`` file, the stop) in a process that does nothing else, with
``ReplayTracer`` (``CUDAWATCH_REPLAY``) standing in for CUPTI: real H200 records
(``tests/data/cupti/records.jsonl.gz``, 45 kernel signatures) replayed ``--speed`` times faster, so an
on-phase delivers records at about the LM's on-phase rate (~34 k/s in §14 at speed 64). It samples
the process RSS every 5 s while the session runs and reports what the soak reports: growth after the
first 2 minutes, the least-squares slope 245-905 s and the Theil-Sen slope over the second half (MiB a
minute); the RSS after the stop (which writes the last shards) is reported apart.

Not exercised (so a flat result clears only the rest): CUPTI itself (attach, finalize, its device
and host buffers, its thread delivering records while the collector's thread writes windows:
the replay delivers on the collector's thread) and the tracer's per-record callback
(``CuptiTracer._completed``); the replay feeds ``Aggregator.add_kernels``, which ends in the
same ``add_kernel_rows``. No GPU needed.

    python benchmarks/replay_soak.py --seconds 930 --json replay_soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gpu_workloads  # noqa: E402  (benchmarks/)
from memory import _robust_slope, _slope  # noqa: E402
from step_log import growth_after_2min  # noqa: E402

RECORDS = HERE.parent / "tests" / "data" / "cupti" / "records.jsonl.gz"


def soak(seconds: float, speed: float, sample_s: float = 5.0, *, out: str | None = None) -> dict:
    os.environ["CUDAWATCH_REPLAY"] = str(RECORDS)
    os.environ["CUDAWATCH_REPLAY_SPEED"] = str(speed)
    import collector

    out = Path(out or tempfile.mkdtemp(prefix="cw-replay-soak-"))
    t0 = time.monotonic()
    rss = [(0.0, gpu_workloads.rss_mib())]
    s = collector.start(job="replay-soak", out=out)
    if not s.active:
        raise SystemExit(f"collector did not start: {s.reason}")
    while time.monotonic() - t0 < seconds:
        time.sleep(sample_s)
        rss.append((time.monotonic() - t0, gpu_workloads.rss_mib()))
    kernels, copies = s.tracer.kernels, s.tracer.copies
    records = kernels + copies
    cycles = sum(1 for row in s.duty_log if row[5] > 0)  # on-phases ended by a detach (memory.py's count)
    collector.stop()
    after_stop = gpu_workloads.rss_mib()  # the stop writes the last shards: reported apart, as the soak's
    # training process samples only while it trains
    growth = growth_after_2min(rss)
    half = [p for p in rss if p[0] >= seconds / 2]
    mid = [p for p in rss if 245 <= p[0] <= 905]
    return {"seconds": seconds, "speed": speed, "records": records, "kernels": kernels, "copies": copies, "records_per_s": records / seconds,
            "cycles": cycles, "controller_duty_at_end": s.controller.duty,
            "shards": sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")),
            "rss_start_mib": rss[0][1], "rss_end_mib": rss[-1][1], "rss_after_stop_mib": after_stop,
            "rss_growth_after_2min_mib": growth[0] if growth else None,
            "rss_slope_245_905_mib_per_min": _slope(mid),
            "rss_theil_sen_second_half_mib_per_min": _robust_slope(half),
            "rss": rss, "python": platform.python_version(), "machine": platform.node()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=930.0)
    ap.add_argument("--speed", type=float, default=64.0, help="replay speed-up (64: ~34 k records/s while on)")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--out", help="folder for the shards (default: a new temporary folder)")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = soak(a.seconds, a.speed, a.sample_s, out=a.out)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("rss", "shards")}, indent=1))


if __name__ == "__main__":
    main()
