"""GPU check of the detach fence (collector/cuda_fence.py) against the real driver, in one process.

  python3 benchmarks/fence_check.py --json fence_check.json      (a GPU, PyTorch; ~1 minute)

Each check has a verdict (``ok``) and the run exits 1 if any fails; the CPU tests use a stand-in
driver, this is the driver itself:
  before_init     a process that never initialized CUDA: the fence waits for nothing, no error
  legacy          200 large matmuls queued on PyTorch's default (legacy) stream: the fence returns
                  when they are done, before its bound (a synchronize right after finds nothing left)
  bound           the same queue with a 20-ms bound: the fence returns at the bound (a timeout)
  nonblocking     the queue on a PyTorch pool stream (non-blocking): not covered, returns at once
                  (shows the fence is no device-wide synchronize; the gap the docs state)
  blocking        the queue on a raw blocking stream (cuStreamCreate, flags 0): covered
  capture_*       CUDA graphs captured (global mode) on a pool stream and on a blocking stream while
                  another thread fences every ~1 ms: no fence may fail, and a capture may fail only
                  where a record hit it after the check (``gap_hits``, the admitted gap); fences run
                  during pool-stream captures, and are skipped during blocking-stream ones
  control         the pool-stream captures again with a fence that does not exchange its thread's
                  capture mode: captures must fail, or the capture checks above prove nothing
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.cuda_fence import StreamFence  # noqa: E402


def _fenced(fence: StreamFence, bound_s: float) -> dict:
    """The fence on a thread of its own (as the collector's), then how long a synchronize still took."""
    import torch

    out, t_before = {}, fence.timeouts

    def run():
        try:
            out["waited_s"] = fence.wait(bound_s)
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"

    th = threading.Thread(target=run)
    th.start()
    th.join()
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    out["sync_after_s"] = time.perf_counter() - t0
    out["timeout"] = fence.timeouts - t_before
    return out


class _NoExchange(StreamFence):
    """The control: a fence that leaves its thread in the default (global) capture mode."""

    def _call(self, name, *args):
        return 0 if name == "cuThreadExchangeStreamCaptureMode" else super()._call(name, *args)


def _captures(fence: StreamFence, stream, n: int = 20) -> dict:
    """``n`` graph captures while another thread fences every ~1 ms (as a collector under a pause
    storm, far more often than its detaches); counts the fences that ran or were skipped while a
    capture was in progress, and the records that hit a capture after the check (the gap the docs
    admit: such a hit drops the fence in the collector)."""
    import torch

    stop, capturing, errors, failed = threading.Event(), threading.Event(), [], []
    counts = {"waits": 0, "skipped": 0, "gap_hits": 0}

    def loop():
        while not stop.is_set():
            during = capturing.is_set()
            try:
                waited = fence.wait(0.01)
            except Exception as exc:  # FenceError: a driver failure, or a call that hit a capture
                if "hit a CUDA graph capture" in str(exc):
                    counts["gap_hits"] += 1
                else:
                    errors.append(f"{type(exc).__name__}: {exc}")
            else:
                if during and capturing.is_set():
                    counts["skipped" if waited is None else "waits"] += 1
            time.sleep(0.001)

    th = threading.Thread(target=loop)
    th.start()
    for _ in range(n):
        g, y = torch.cuda.CUDAGraph(), torch.ones(1024, device="cuda")
        try:
            # the outer stream context restores the current stream even if the capture fails
            with torch.cuda.stream(torch.cuda.current_stream()):
                capturing.set()
                try:
                    with torch.cuda.graph(g, stream=stream):
                        for _ in range(400):
                            y = y * 1.0001 + 1
                finally:
                    capturing.clear()
        except Exception as exc:  # a capture the fence invalidated: what this check looks for
            failed.append(str(exc).splitlines()[0][:200])
    stop.set()
    th.join()
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # a failed capture can leave an error behind
        failed.append(f"synchronize after: {str(exc).splitlines()[0][:200]}")
    return {"captures": n, "failed": len(failed), "first_failure": failed[:1], "fence_errors": len(errors),
            "first_fence_error": errors[:1], "fences_during_captures": counts["waits"],
            "skipped_during_captures": counts["skipped"], "gap_hits": counts["gap_hits"]}


def verdicts(res: dict) -> dict:
    """Whether each check shows the fence working (what the docstring says each must show)."""
    q = res["queue_alone_s"]
    leg, bnd, nb, blk = res["legacy"], res["bound"], res["nonblocking"], res["blocking"]
    cp, cb, ctl = res["capture_pool_stream"], res["capture_blocking_stream"], res.get("control", {})

    def covered(c):  # waited for the queue, not to the bound, and left nothing to synchronize
        return ("error" not in c and c["timeout"] == 0 and c["waited_s"] is not None
                and 0.5 * q <= c["waited_s"] < 1.0 and c["sync_after_s"] < 0.05 * q)

    return {
        "before_init": res["before_init"]["waits"] == 0 and res["before_init"]["waited_s"] < 0.01,
        "legacy": covered(leg),
        "bound": "error" not in bnd and bnd["timeout"] == 1 and bnd["waited_s"] < 0.1 and bnd["sync_after_s"] > 0.2 * q,
        "nonblocking": "error" not in nb and nb["timeout"] == 0 and nb["waited_s"] < 0.1 * q and nb["sync_after_s"] > 0.5 * q,
        "blocking": covered(blk),
        # a capture may fail only where a record hit it after the check (the admitted gap, counted)
        "capture_pool_stream": cp["failed"] <= cp["gap_hits"] and cp["fence_errors"] == 0 and cp["fences_during_captures"] > 0,
        "capture_blocking_stream": cb["failed"] <= cb["gap_hits"] and cb["fence_errors"] == 0 and cb["skipped_during_captures"] > 0,
        "control": ctl.get("failed", 0) > 0,  # without the exchange, captures must fail
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    a = ap.parse_args()
    fence = StreamFence()
    res = {"before_init": {"waited_s": fence.wait(0.1), "waits": fence.waits}}
    import torch

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def queue(n=200):
        for _ in range(n):
            x @ x

    queue(3)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    queue()
    torch.cuda.synchronize()
    res["queue_alone_s"] = time.perf_counter() - t0
    queue()
    res["legacy"] = _fenced(fence, 1.0)
    queue()
    res["bound"] = _fenced(fence, 0.02)
    pool = torch.cuda.Stream()
    with torch.cuda.stream(pool):
        queue()
    res["nonblocking"] = _fenced(fence, 1.0)
    cu = ctypes.CDLL("libcuda.so.1")
    h = ctypes.c_void_p()
    rc = cu.cuStreamCreate(ctypes.byref(h), 0)
    if rc != 0:
        raise SystemExit(f"cuStreamCreate returned {rc}")
    blocking = torch.cuda.ExternalStream(h.value)
    with torch.cuda.stream(blocking):
        queue()
    res["blocking"] = _fenced(fence, 1.0)
    torch.cuda.synchronize()
    res["capture_pool_stream"] = _captures(fence, None)
    res["capture_blocking_stream"] = _captures(fence, blocking)
    res["fence"] = {"waits": fence.waits, "timeouts": fence.timeouts, "skipped": fence.skipped, "idle": fence.idle}
    res["control"] = _captures(_NoExchange(), None)  # last: a failed capture may leave errors behind
    cu.cuStreamDestroy_v2(h)
    res["device"] = torch.cuda.get_device_name()
    res["ok"] = verdicts(res)
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    failed = [k for k, v in res["ok"].items() if not v]
    print("all checks pass" if not failed else f"FAILED: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
