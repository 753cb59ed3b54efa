"""GPU check of the detach fence (collector/cuda_fence.py) against the real driver, in one process.

  python3 benchmarks/fence_check.py --json fence_check.json      (a GPU, PyTorch; ~1 minute)

What each line checks (the CPU tests use a stand-in driver; this is the driver itself):
  before_init     a process that never initialized CUDA: the fence waits for nothing, no error
  legacy          200 large matmuls queued on PyTorch's default (legacy) stream: the fence returns
                  when they are done (a synchronize right after finds nothing left)
  bound           the same queue with a 20-ms bound: the fence returns at the bound (a timeout)
  nonblocking     the queue on a PyTorch pool stream (non-blocking): not covered, returns at once
  blocking        the queue on a raw blocking stream (cuStreamCreate, flags 0): covered
  capture_*       CUDA graphs captured (global mode) on a pool stream and on a blocking stream
                  while another thread runs fences in a loop: no capture may fail; fences during a
                  blocking-stream capture are skipped
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

from collector.cuda_fence import FenceError, StreamFence  # noqa: E402


def _fenced(fence: StreamFence, bound_s: float) -> dict:
    """The fence on a thread of its own (as the collector's), then how long a synchronize still took."""
    import torch

    out = {}
    th = threading.Thread(target=lambda: out.update(waited_s=fence.wait(bound_s)))
    th.start()
    th.join()
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    out["sync_after_s"] = time.perf_counter() - t0
    return out


def _captures(fence: StreamFence, stream, n: int = 20) -> dict:
    import torch

    stop, errors, failed = threading.Event(), [], []

    def loop():
        while not stop.is_set():
            try:
                fence.wait(0.01)
            except FenceError as exc:
                errors.append(str(exc))
                return

    skipped0 = fence.skipped
    th = threading.Thread(target=loop)
    th.start()
    for _ in range(n):
        g, y = torch.cuda.CUDAGraph(), torch.ones(1024, device="cuda")
        try:
            with torch.cuda.graph(g, stream=stream):
                for _ in range(400):
                    y = y * 1.0001 + 1
        except Exception as exc:  # a capture the fence invalidated: what this check looks for
            failed.append(str(exc).splitlines()[0][:200])
    stop.set()
    th.join()
    torch.cuda.synchronize()
    return {"captures": n, "failed": len(failed), "first_failure": failed[:1], "fence_errors": errors[:3],
            "fences_skipped": fence.skipped - skipped0}


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
    t_before = fence.timeouts
    res["bound"] = {**_fenced(fence, 0.02), "timeout": fence.timeouts - t_before}
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
    res["capture_pool_stream"] = _captures(fence, None)
    res["capture_blocking_stream"] = _captures(fence, blocking)
    res["fence"] = {"waits": fence.waits, "timeouts": fence.timeouts, "skipped": fence.skipped}
    res["device"] = torch.cuda.get_device_name()
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
