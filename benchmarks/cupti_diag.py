"""CUPTI diagnostics on a real GPU: why records are rejected, what a detach/attach cycle retains,
and where the per-launch cost of tracing goes. Each experiment runs in its own process (CUPTI
state is per process); ``all`` runs them in sequence and writes one JSON.

  python benchmarks/cupti_diag.py all --json diag.json [--records rec.jsonl.gz] [--seconds 40]
  python benchmarks/cupti_diag.py zerots --config ours_forced --seconds 40
  python benchmarks/cupti_diag.py cycles --variant finalize_ours --cycles 15 [--attr ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED=1]
      [--kinds CONCURRENT_KERNEL,MEMCPY | --kinds none]
  python benchmarks/cupti_diag.py launch

zerots: the CNN training loop of ``benchmarks/memory.py`` traced all the time (no cycling) while a
  monitor thread flushes every second like the collector's session; per second it logs records
  delivered, records with start == 0 / end == 0 / end < start, CUPTI's dropped count, RSS and the
  GPU memory in use. Configs differ in the device-buffer attributes and in forced/unforced flushes.
cycles: the same loop with N attach / 0.3 s traced / pause cycles; per cycle RSS, GPU memory,
  host buffers requested vs completed and the cycle's time, for several pausing mechanisms, and the
  GPU memory the cycles after the first two kept (``--attr`` sets further activity attributes at
  every attach: which of CUPTI's allocations a finalize does not give back; ``finalize_idle``
  attaches with every kind enabled but launches nothing while attached: is it per attach or per record;
  ``disable_context`` attaches once and pauses with ``activity_disable_context`` on the current context;
  ``--kinds`` enables only those activity kinds, ``none`` none at all: which kind's set-up a finalize keeps).
launch: launch-bound loop (100 x ``x.add_(1)`` then sync) rate untraced, traced with the real
  callback, with a callback that only counts, with one that only iterates the records, with
  records left inside CUPTI (no delivery during the measurement), after disable, after finalize,
  and traced / paused with the kinds enabled and disabled per context (``activity_enable_context``).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import subprocess
import sys
import threading
import time

import gpu_workloads  # benchmarks/, the script's folder

ZEROTS_CONFIGS = {
    # name: (device buffer bytes or None = CUPTI default, pool limit or None, forced flush)
    "ours_forced": (4 << 20, 4, True),
    "default_forced": (None, None, True),
    "ours_unforced": (4 << 20, 4, False),
}
CYCLE_VARIANTS = ("finalize_ours", "finalize_host1", "finalize_default_dev", "disable_flush", "disable_first_finalize",
                  "finalize_idle", "disable_context")


def current_context() -> int:
    """The calling thread's current CUcontext (after torch has initialized CUDA: the primary one)."""
    ctx = ctypes.c_void_p()
    rc = ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx))
    if rc != 0 or not ctx.value:
        raise RuntimeError(f"cuCtxGetCurrent returned {rc}, context {ctx.value}")
    return ctx.value


#: activity attributes whose value is a uint8_t flag in cupti_activity.h (the others used here are size_t)
FLAG_ATTRS = ("ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED", "ATTR_ZEROED_OUT_BUFFER", "ATTR_PER_THREAD_BUFFER")


def _attr_ctype(attr):
    return ctypes.c_uint8 if attr.name in FLAG_ATTRS else ctypes.c_size_t


def _set_attr(cupti, attr, value: int) -> None:
    ctype = _attr_ctype(attr)
    v, size = ctype(value), ctypes.c_size_t(ctypes.sizeof(ctype))
    cupti.activity_set_attribute(attr, ctypes.addressof(size), ctypes.addressof(v))


def parse_attrs(items: list[str]) -> dict[str, int]:
    """``["ATTR_X=1", ...]`` (``--attr``) as ``{"ATTR_X": 1}``; a malformed item is an error."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("ATTR_") or not value.strip().isdigit():
            raise ValueError(f"--attr wants ATTR_NAME=non-negative integer, got {item!r}")
        out[name] = int(value)
    return out


def gpu_growth(rows: list[dict], skip: int = 2) -> dict:
    """GPU memory a run of cycles kept: the sum of per-cycle deltas after the first ``skip`` cycles
    (one-off allocations), how many cycles grew, and the mean per cycle."""
    late = [r["gpu_delta_mib"] for r in rows[skip:]]
    return {"gpu_growth_after_first_cycles_mib": round(sum(late), 2), "cycles_with_gpu_growth": sum(1 for d in late if d > 0),
            "gpu_mib_per_cycle": round(sum(late) / len(late), 3) if late else None}


def _get_attr(cupti, attr) -> int | str:
    ctype = _attr_ctype(attr)
    v, size = ctype(0), ctypes.c_size_t(ctypes.sizeof(ctype))
    try:
        cupti.activity_get_attribute(attr, ctypes.addressof(size), ctypes.addressof(v))
    except Exception as exc:  # reported, not hidden
        return f"error: {exc}"
    return int(v.value)


def _dropped(cupti) -> int | str:
    v = ctypes.c_size_t(0)
    try:
        cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(v))
    except Exception as exc:
        return f"error: {exc}"
    return int(v.value)


DEFAULT_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "OVERHEAD")


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``--kinds``: a comma list of ``cupti.ActivityKind`` names, ``none`` for no kind at all, or
    None for the four kinds the collector enables."""
    if text is None:
        return DEFAULT_KINDS
    if text.strip().lower() == "none":
        return ()
    names = tuple(n.strip().upper() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError(f"--kinds wants kind names or 'none', got {text!r}")
    return names


def _kinds(cupti, names: tuple[str, ...] = DEFAULT_KINDS):
    AK = cupti.ActivityKind
    unknown = [n for n in names if not hasattr(AK, n)]
    if unknown:
        raise SystemExit(f"--kinds: cupti.ActivityKind has no {', '.join(unknown)}")
    return [getattr(AK, n) for n in names]


class Counter:
    """A buffer-completed callback that classifies every record (kernel/copy/memset) by validity."""

    def __init__(self, cupti, keep_path: str | None = None) -> None:
        AK = cupti.ActivityKind
        self.ck, self.mc, self.ms, self.oh = AK.CONCURRENT_KERNEL, AK.MEMCPY, AK.MEMSET, AK.OVERHEAD
        self.c = {"records": 0, "valid": 0, "start0": 0, "end0": 0, "end_lt_start": 0, "overhead": 0, "buffers": 0}
        self.requested = 0
        self.lock = threading.Lock()
        self.keep = [] if keep_path else None
        self.keep_path = keep_path
        self.keep_valid = 0
        self.keep_bad = 0

    def requested_cb(self, size=8 << 20):
        self.requested += 1
        return size, 0

    def completed(self, acts) -> None:
        c = self.c
        with self.lock:
            c["buffers"] += 1
            for a in acts:
                k = a.kind
                if k == self.oh:
                    c["overhead"] += 1
                    continue
                if k not in (self.ck, self.mc, self.ms):
                    continue
                c["records"] += 1
                s, e = a.start, a.end
                bad = None
                if s == 0:
                    c["start0"] += 1
                    bad = "start0"
                if e == 0:
                    c["end0"] += 1
                    bad = bad or "end0"
                if s and e and e < s:
                    c["end_lt_start"] += 1
                    bad = "end_lt_start"
                if bad is None:
                    c["valid"] += 1
                if self.keep is not None and k == self.ck:
                    if (bad and self.keep_bad < 1500) or (not bad and self.keep_valid < 1500):
                        if bad:
                            self.keep_bad += 1
                        else:
                            self.keep_valid += 1
                        self.keep.append({"kind": "kernel", "rec": [s, e, a.name, a.grid_x, a.grid_y, a.grid_z, a.block_x,
                                                                    a.block_y, a.block_z, a.registers_per_thread,
                                                                    a.static_shared_memory + a.dynamic_shared_memory, a.device_id],
                                          "correlation_id": getattr(a, "correlation_id", None), "stream_id": getattr(a, "stream_id", None)})

    def write_keep(self) -> None:
        if self.keep is not None and self.keep_path:
            with gzip.open(self.keep_path, "wt") as fh:
                for item in self.keep:
                    fh.write(json.dumps(item) + "\n")


def zerots(config: str, seconds: float, keep_path: str | None) -> dict:
    from cupti import cupti

    dev_buf, pool, forced = ZEROTS_CONFIGS[config]
    A = cupti.ActivityAttribute
    cnt = Counter(cupti, keep_path)
    cupti.activity_register_callbacks(cnt.requested_cb, cnt.completed)
    if dev_buf is not None:
        _set_attr(cupti, A.ATTR_DEVICE_BUFFER_SIZE, dev_buf)
        _set_attr(cupti, A.ATTR_DEVICE_BUFFER_POOL_LIMIT, pool)
    attrs = {a.name: _get_attr(cupti, a) for a in (A.ATTR_DEVICE_BUFFER_SIZE, A.ATTR_DEVICE_BUFFER_POOL_LIMIT,
                                                    A.ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE,
                                                    A.ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED)}
    for k in _kinds(cupti):
        cupti.activity_enable(k)
    import torch

    step = gpu_workloads.cnn_step()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    series = []
    stop = threading.Event()
    t0 = time.monotonic()
    steps = [0]

    def monitor():
        dropped_total = 0
        while not stop.wait(1.0):
            cupti.activity_flush_all(1 if forced else 0)
            d = _dropped(cupti)
            if isinstance(d, int):
                dropped_total += d
            free, total = torch.cuda.mem_get_info()
            with cnt.lock:
                series.append({"t": round(time.monotonic() - t0, 2), "steps": steps[0], **cnt.c, "dropped": dropped_total,
                               "rss_mib": round(gpu_workloads.rss_mib(), 1), "gpu_used_mib": round((total - free) / 2**20, 1),
                               "requested": cnt.requested})

    th = threading.Thread(target=monitor, daemon=True)
    th.start()
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        step()
        steps[0] += 1
    torch.cuda.synchronize()
    stop.set()
    th.join()
    cupti.activity_flush_all(1)
    cnt.write_keep()
    onset = next((p["t"] for p in series if p["records"] > p["valid"]), None)
    return {"config": config, "device_buffer": dev_buf, "pool_limit": pool, "forced_flush": forced, "attrs": attrs,
            "steps": steps[0], "final": dict(cnt.c), "first_invalid_at_s": onset, "series": series}


def cycles(variant: str, n: int, attrs: dict[str, int] | None = None, kind_names: tuple[str, ...] = DEFAULT_KINDS) -> dict:
    """``attrs`` (``--attr``): further activity attributes set at every attach, after the variant's own;
    ``kind_names`` (``--kinds``): the activity kinds enabled at every attach."""
    from cupti import cupti

    A = cupti.ActivityAttribute
    attrs = attrs or {}
    unknown = [name for name in attrs if not hasattr(A, name)]
    if unknown:  # before the GPU warm-up, not at the first attach
        raise SystemExit(f"--attr: cupti.ActivityAttribute has no {', '.join(unknown)}")
    read_back: dict = {}
    host = 1 << 20 if variant == "finalize_host1" else 8 << 20
    cnt = Counter(cupti)
    kinds = _kinds(cupti, kind_names)  # before the GPU warm-up too
    import torch

    def set_dev():
        if variant != "finalize_default_dev" and variant != "disable_flush":
            _set_attr(cupti, A.ATTR_DEVICE_BUFFER_SIZE, 4 << 20)
            _set_attr(cupti, A.ATTR_DEVICE_BUFFER_POOL_LIMIT, 4)
        for name, value in attrs.items():
            _set_attr(cupti, getattr(A, name), value)
        if attrs and not read_back:  # while attached (after a finalize a call would start CUPTI afresh)
            read_back.update({k: _get_attr(cupti, getattr(A, k)) for k in attrs})

    def attach():
        cupti.activity_register_callbacks(lambda: cnt.requested_cb(host), cnt.completed)
        set_dev()
        for k in kinds:
            if variant == "disable_context":
                cupti.activity_enable_context(ctx, k)
            else:
                cupti.activity_enable(k)

    step = gpu_workloads.cnn_step()
    for _ in range(200):  # cuDNN/cuBLAS modules loaded before the first attach
        step()
    torch.cuda.synchronize()
    ctx = current_context()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rows = []
    attached = False
    for i in range(n):
        free, total = torch.cuda.mem_get_info()
        r0, g0 = gpu_workloads.rss_mib(), (total - free) / 2**20
        t0 = time.perf_counter()
        if variant == "disable_flush" and attached:
            for k in kinds:
                cupti.activity_enable(k)
        elif variant == "disable_context" and attached:
            for k in kinds:
                cupti.activity_enable_context(ctx, k)
        else:
            attach()
            attached = True
        t_attach = time.perf_counter() - t0
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:
            if variant == "finalize_idle":  # attached with every kind enabled, nothing launched: no records
                time.sleep(0.01)
            else:
                step()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        if variant == "disable_flush":
            for k in kinds:
                cupti.activity_disable(k)
            cupti.activity_flush_all(1)
        elif variant == "disable_context":
            for k in kinds:
                cupti.activity_disable_context(ctx, k)
            cupti.activity_flush_all(1)
        elif variant == "disable_first_finalize":
            for k in kinds:
                cupti.activity_disable(k)
            cupti.activity_flush_all(1)
            cupti.activity_flush_all(1)
            cupti.finalize()
        else:
            cupti.activity_flush_all(1)
            for k in kinds:
                cupti.activity_disable(k)
            cupti.finalize()
        t_pause = time.perf_counter() - t1
        t_end = time.perf_counter() + 0.1
        while time.perf_counter() < t_end:
            step()
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        rows.append({"cycle": i, "rss_delta_mib": round(gpu_workloads.rss_mib() - r0, 2), "gpu_delta_mib": round((total - free) / 2**20 - g0, 2),
                     "requested": cnt.requested, "completed": cnt.c["buffers"], "attach_s": round(t_attach, 4),
                     "pause_s": round(t_pause, 4), "records": cnt.c["records"], "valid": cnt.c["valid"]})
    r_before = gpu_workloads.rss_mib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    per = [r["rss_delta_mib"] for r in rows[2:]]
    return {"variant": variant, "attrs": attrs, "attrs_read_back": read_back, "kinds": list(kind_names),
            "host_buffer": host, "cycles": n, "rows": rows, **gpu_growth(rows),
            "rss_per_cycle_mib_median": sorted(per)[len(per) // 2] if per else None,
            "rss_released_by_malloc_trim_mib": round(r_before - gpu_workloads.rss_mib(), 1),
            "outstanding_buffers": cnt.requested - cnt.c["buffers"], "final": dict(cnt.c)}


def launch() -> dict:
    from cupti import cupti

    from collector.aggregate import Aggregator
    from collector.budget import BufferBudget
    from collector.tracer import CuptiTracer

    kinds = _kinds(cupti)
    launches = gpu_workloads.launch_step()

    def rate(sec=1.5):
        return gpu_workloads.launch_rate(launches, sec)

    def attach_with(completed, size=8 << 20, only=None):
        cupti.activity_register_callbacks(lambda: (size, 0), completed)
        for k in (only or kinds):
            cupti.activity_enable(k)

    def detach(only=None):
        cupti.activity_flush_all(1)
        for k in (only or kinds):
            cupti.activity_disable(k)
        cupti.finalize()

    rate(1.0)
    res = {"untraced": rate()}
    # 1. the real tracer (tuple per record + aggregation)
    agg = Aggregator(60)
    t = CuptiTracer(agg, BufferBudget(128 << 20, host_buffer_bytes=8 << 20))  # the host-buffer size of the rows below
    # (8 MiB, the default until 2026-12-07; a 32-MiB budget takes at most 2 MiB since, hence the larger total)
    t.attach()
    rate(0.3)
    cb0, k0 = t.callback_s, t.kernels
    res["traced_real_callback"] = rate()
    t.flush(True)
    res["real_callback_us_per_record"] = 1e6 * (t.callback_s - cb0) / max(t.kernels - k0, 1)
    t.detach()
    res["after_finalize"] = rate()
    # 2. callback that only counts
    n = [0]
    attach_with(lambda acts: n.__setitem__(0, n[0] + len(acts)))
    rate(0.3)
    res["traced_count_only"] = rate()
    detach()
    # 3. callback that touches every record's kind, start and end (the binding's record objects)
    def touch(acts):
        for a in acts:
            a.kind, a.start, a.end

    attach_with(touch)
    rate(0.3)
    res["traced_touch_fields"] = rate()
    detach()
    # 4. records stay inside CUPTI during the measurement (64 MiB host buffers, no flush): CUPTI's launch path alone
    attach_with(lambda acts: n.__setitem__(0, n[0] + len(acts)), size=64 << 20)
    rate(0.3)
    cupti.activity_flush_all(1)
    res["traced_no_delivery"] = rate(1.0)
    cupti.activity_flush_all(1)
    # 5. disable all kinds, stay attached
    for k in kinds:
        cupti.activity_disable(k)
    cupti.activity_flush_all(1)
    res["after_disable"] = rate()
    cupti.finalize()
    res["after_finalize_2"] = rate()
    # 6. kernels only, counting callback
    attach_with(lambda acts: n.__setitem__(0, n[0] + len(acts)), only=[cupti.ActivityKind.CONCURRENT_KERNEL])
    rate(0.3)
    res["traced_kernels_only_count"] = rate()
    detach(only=[cupti.ActivityKind.CONCURRENT_KERNEL])
    # 7. kinds enabled and disabled per context (one attach, no finalize): the launch path while paused
    try:
        ctx = current_context()
        cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda acts: n.__setitem__(0, n[0] + len(acts)))
        for k in kinds:
            cupti.activity_enable_context(ctx, k)
        rate(0.3)
        res["traced_context_count"] = rate()
        cupti.activity_flush_all(1)
        for k in kinds:
            cupti.activity_disable_context(ctx, k)
        cupti.activity_flush_all(1)
        res["after_disable_context"] = rate()
        cupti.finalize()
    except Exception as exc:  # reported, and the rest of the run still measured
        res["context_error"] = f"{type(exc).__name__}: {exc}"
    res["untraced_end"] = rate()
    base = (res["untraced"] + res["untraced_end"]) / 2
    res["us_per_launch"] = {k: 1e6 / v for k, v in res.items() if isinstance(v, float) and k.startswith(("untraced", "traced", "after"))}
    res["extra_us_per_launch_vs_untraced"] = {k: round(1e6 / v - 1e6 / base, 3) for k, v in res.items()
                                              if isinstance(v, float) and k.startswith(("traced", "after"))}
    return res


def _sub(args: list[str], timeout: float) -> dict:
    p = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        return {"args": args, "error": p.returncode, "stderr": p.stderr[-3000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    z = sub.add_parser("zerots")
    z.add_argument("--config", choices=list(ZEROTS_CONFIGS), required=True)
    z.add_argument("--seconds", type=float, default=40)
    z.add_argument("--records")
    c = sub.add_parser("cycles")
    c.add_argument("--variant", choices=CYCLE_VARIANTS, required=True)
    c.add_argument("--cycles", type=int, default=15)
    c.add_argument("--attr", action="append", default=[], metavar="ATTR_NAME=VALUE",
                   help="a further cupti.ActivityAttribute set at every attach (repeatable)")
    c.add_argument("--kinds", help="comma list of cupti.ActivityKind names enabled at every attach, or 'none' "
                                   f"(default: {','.join(DEFAULT_KINDS)})")
    sub.add_parser("launch")
    a_ = sub.add_parser("all")
    a_.add_argument("--json", required=True)
    a_.add_argument("--records")
    a_.add_argument("--seconds", type=float, default=40)
    a_.add_argument("--cycles", type=int, default=15)
    a = ap.parse_args()
    if a.cmd == "zerots":
        print(json.dumps(zerots(a.config, a.seconds, a.records)))
    elif a.cmd == "cycles":
        print(json.dumps(cycles(a.variant, a.cycles, parse_attrs(a.attr), parse_kinds(a.kinds))))
    elif a.cmd == "launch":
        print(json.dumps(launch()))
    else:
        out = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "zerots": [], "cycles": []}
        out["launch"] = _sub(["launch"], 120)
        print("launch", json.dumps(out["launch"].get("extra_us_per_launch_vs_untraced", out["launch"])), file=sys.stderr, flush=True)
        for v in CYCLE_VARIANTS:
            r = _sub(["cycles", "--variant", v, "--cycles", str(a.cycles)], 150)
            out["cycles"].append(r)
            print("cycles", v, {k: r.get(k) for k in ("rss_per_cycle_mib_median", "outstanding_buffers", "rss_released_by_malloc_trim_mib", "error")},
                  file=sys.stderr, flush=True)
        for cfg in ZEROTS_CONFIGS:
            extra = ["--records", a.records] if (a.records and cfg == "ours_forced") else []
            r = _sub(["zerots", "--config", cfg, "--seconds", str(a.seconds), *extra], a.seconds + 90)
            out["zerots"].append(r)
            print("zerots", cfg, r.get("final"), "first invalid at", r.get("first_invalid_at_s"), r.get("attrs"), r.get("error"), file=sys.stderr, flush=True)
            with open(a.json, "w") as fh:
                json.dump(out, fh)
        with open(a.json, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
