"""Memory one CUPTI buffer callback holds at once, and its CPU time, handing rows over whole or in chunks.

  python benchmarks/callback_peak.py --json callback_peak.json [--records 35000 4096] [--reps 5]

The collector's buffer-completed callback (``collector.tracer.CuptiTracer._completed``, run here as
it is) reads each record's fields into a row and hands the rows to the real aggregator. Reading a
field makes a Python object (the kernel's name string, the 64-bit timestamps), so a callback that
builds the rows of a whole buffer before handing them over holds all of them at once: a full 8-MiB
host buffer held ~35 k records on the H100 (docs/benchmarks.md §19: 666,384 records in 19 buffers).
Since 2026-12-07 it hands them over ``collector.tracer.CHUNK`` records at a time. This script runs
the callback both ways (``CHUNK`` set to the buffer's size, then the shipped value) on the same
records and reports, per buffer size: the peak of Python allocations during the callback
(``tracemalloc``, after one warm-up call), the CPU time per record (best of ``--reps``, without
``tracemalloc``), and whether the aggregator ended with the same windows (the tracer's wall clock is
pinned, so both ways file their delivery counts alike).

CPU only, no GPU: cupti-python is replaced by a stand-in module (only what ``collector.tracer``
reads at import), and its record objects by objects that make each field on access, as the
binding's extension types do when they return a C field. Kernel names and launch shapes come from
the H200 capture in ``tests/data/cupti/records.jsonl.gz``. Not counted: the binding's own list of
record objects for the buffer, which it builds before the callback and which does not depend on how
the callback hands rows over (``CUDAWATCH_HOST_BUFFER_KIB`` shrinks that one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "tests" / "data" / "cupti" / "records.jsonl.gz"
FIELDS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
          "static_shared_memory", "dynamic_shared_memory", "device_id")


def install_stand_in_cupti() -> None:
    """A ``cupti`` package with the enums ``collector.tracer`` reads at import (never a GPU call)."""
    class _Enum:
        def __init__(self, *names):
            for i, n in enumerate(names):
                setattr(self, n, i)

    mod = types.ModuleType("cupti.cupti")
    mod.ActivityKind = _Enum("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "OVERHEAD")
    mod.ActivityOverheadKind = _Enum("CUPTI_INSTRUMENTATION", "CUPTI_RESOURCE", "COMMAND_BUFFER_FULL")
    mod.ActivityAttribute = _Enum("ATTR_DEVICE_BUFFER_SIZE", "ATTR_DEVICE_BUFFER_POOL_LIMIT")
    pkg = types.ModuleType("cupti")
    pkg.cupti = mod
    sys.modules["cupti"], sys.modules["cupti.cupti"] = pkg, mod


def record_class():
    """Stand-in for the binding's kernel record: every field is a fresh Python object on access."""

    class KernelRecord:
        __slots__ = ("_start", "_name", "_shape")
        kind = 0  # ActivityKind.CONCURRENT_KERNEL of the stand-in module

        def __init__(self, start: int, name: str, shape: tuple) -> None:
            self._start, self._name, self._shape = start, name.encode(), shape

        start = property(lambda s: s._start + 0)
        end = property(lambda s: s._start + 1_500)
        name = property(lambda s: s._name.decode())  # a C string decoded on each access

    for i, f in enumerate(FIELDS):
        setattr(KernelRecord, f, property(lambda s, i=i: s._shape[i]))
    return KernelRecord


def captured_kernels() -> list[tuple[str, tuple]]:
    """(name, launch shape in ``FIELDS`` order) of each timed kernel record in the capture."""
    from collector.replay import load_records

    kernels, _ = load_records(RECORDS)
    # a signature: name, grid x/y/z, block x/y/z, registers, shared memory (static + dynamic), device
    return [(sig[0], (*sig[1:8], sig[8], 0, sig[9])) for _, _, sig in kernels]


def buffer_of(n: int, t0_ns: int, captured: list[tuple[str, tuple]]) -> list:
    """``n`` kernel records 1 us apart from ``t0_ns``, names and shapes drawn in turn from ``captured``."""
    cls = record_class()
    return [cls(t0_ns + i * 1_000, *captured[i % len(captured)]) for i in range(n)]


def one_callback(records: list, chunk: int, *, trace: bool, delivered_at_s: float) -> dict:
    """Run the tracer's buffer callback once on ``records`` with ``CHUNK`` = ``chunk``; its wall clock
    reads ``delivered_at_s`` (so both ways file the delivery counts in the same window)."""
    import collector.tracer as tracer_mod
    from collector.aggregate import Aggregator

    agg = Aggregator(60)
    tracer = tracer_mod.CuptiTracer(agg)
    old, tracer_mod.CHUNK = tracer_mod.CHUNK, chunk
    clock, tracer_mod.time = tracer_mod.time, types.SimpleNamespace(time=lambda: delivered_at_s, thread_time=time.thread_time)
    try:
        if trace:
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        c0 = time.thread_time()
        tracer._completed(records)
        cpu = time.thread_time() - c0
        peak = tracemalloc.get_traced_memory()[1] - base if trace else None
    finally:
        if trace:
            tracemalloc.stop()
        tracer_mod.CHUNK, tracer_mod.time = old, clock
    windows = [(w.start_s, w.kernels, w.delivered, w.valid) for w in agg.take_all()]
    return {"peak_mib": None if peak is None else peak / 2**20, "cpu_s": cpu, "kernels": tracer.kernels,
            "windows": windows}


def measure(n: int, reps: int, captured: list[tuple[str, tuple]]) -> dict:
    import collector.tracer as tracer_mod

    t0_ns = time.time_ns()
    records = buffer_of(n, t0_ns, captured)
    at = t0_ns / 1e9
    shipped = tracer_mod.CHUNK
    out, windows = {"records": n, "chunk": shipped}, []
    one_callback(records, shipped, trace=False, delivered_at_s=at)  # warm-up: one-off allocations before either way
    for name, chunk in (("whole", max(n, 1)), ("chunked", shipped)):
        traced = one_callback(records, chunk, trace=True, delivered_at_s=at)
        cpu = min(one_callback(records, chunk, trace=False, delivered_at_s=at)["cpu_s"] for _ in range(reps))
        out[name] = {"peak_mib": round(traced["peak_mib"], 2), "cpu_us_per_record": round(cpu / n * 1e6, 3),
                     "kernels": traced["kernels"]}
        windows.append(traced["windows"])
    out["same_windows"] = windows[0] == windows[1]
    out["peak_ratio_chunked_over_whole"] = round(out["chunked"]["peak_mib"] / out["whole"]["peak_mib"], 3)
    out["cpu_ratio_chunked_over_whole"] = round(out["chunked"]["cpu_us_per_record"] / out["whole"]["cpu_us_per_record"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, nargs="+", default=[35_000, 4_096], help="records per buffer")
    ap.add_argument("--reps", type=int, default=5, help="timed callbacks per way (the best counts)")
    ap.add_argument("--json")
    a = ap.parse_args()
    install_stand_in_cupti()
    sys.path.insert(0, str(REPO))  # collector/ when the repository is not installed
    captured = captured_kernels()
    res = {"machine": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
           "load_average": os.getloadavg(), "argv": sys.argv[1:],
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "runs": [measure(n, a.reps, captured) for n in a.records]}
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
