"""Wait until the work a program queued before now has finished on its GPUs (the detach's fence).

A detach's forced flush returns the records of kernels still queued on the GPU without timestamps
(collector.drain). The adaptive drain guesses how long to wait; under GPU sharing the queue of each
process grows and the guess misses (docs/benchmarks.md §7, §15). A fence waits exactly as long as
the queue needs, up to a bound: for every device whose primary context is active (the contexts
PyTorch and the CUDA runtime use) it records a CUDA event on that context's legacy default stream
(``cuEventRecord(ev, 0)``) and polls ``cuEventQuery`` until every event has completed or the bound
has passed. An event on the legacy stream completes once all work queued before it on the legacy
stream and on every blocking stream of the context has finished — the stream PyTorch computes on
unless a program switches streams. Work on non-blocking streams (NCCL's, side streams) is not
covered: the bound still ends the wait, and whatever is unfinished is counted as before.

Polling, never a blocking synchronize: a kernel that never ends (a persistent kernel) cannot hold
the collector's thread beyond the bound. Driver API through ctypes (``libcuda.so.1``), like the
rest of the collector's GPU code only in ``collector/``; ``lib`` takes a stand-in for CPU tests.
The fence is armed after the traced kinds are disabled and before the forced flush and
``cuptiFinalize`` (the ``callback`` finalizer subscribes only after the forced flush), so the
driver calls here are never traced and never finalize CUPTI.
"""

from __future__ import annotations

import ctypes
import time

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NOT_READY = 600
CU_EVENT_DISABLE_TIMING = 0x2
POLL_S = 0.0005


class FenceError(RuntimeError):
    """A driver call failed: the fence cannot be used in this process."""


class StreamFence:
    """``wait(bound_s)`` returns the seconds waited: until the work queued before the call is done on
    every active primary context's legacy stream, or ``bound_s``, whichever comes first."""

    def __init__(self, lib=None) -> None:
        self._lib = lib
        self.waits = 0
        self.timeouts = 0  # waits the bound ended (work still queued, or on a kernel that never ends)

    def _cu(self):
        if self._lib is None:
            try:
                self._lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise FenceError(f"libcuda.so.1 not loadable: {exc}") from exc
        return self._lib

    def _call(self, name: str, *args) -> int:
        rc = getattr(self._cu(), name)(*args)
        if rc not in (CUDA_SUCCESS, CUDA_ERROR_NOT_READY):
            raise FenceError(f"{name} returned CUDA error {rc}")
        return rc

    def _arm(self) -> list[tuple[int, ctypes.c_void_p, ctypes.c_void_p]]:
        """One event per active primary context, recorded on its legacy default stream."""
        count = ctypes.c_int(0)
        rc = self._cu().cuDeviceGetCount(ctypes.byref(count))
        if rc == CUDA_ERROR_NOT_INITIALIZED:
            return []  # the process never initialized CUDA: nothing queued (and cuInit here would cost it)
        if rc != CUDA_SUCCESS:
            raise FenceError(f"cuDeviceGetCount returned CUDA error {rc}")
        armed = []
        try:
            for ordinal in range(count.value):
                dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
                self._call("cuDeviceGet", ctypes.byref(dev), ordinal)
                self._call("cuDevicePrimaryCtxGetState", dev, ctypes.byref(flags), ctypes.byref(active))
                if not active.value:  # never retain an inactive context: that would create one on the GPU
                    continue
                ctx, ev = ctypes.c_void_p(), ctypes.c_void_p()
                self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
                armed.append((dev.value, ctx, ev))
                with _current(self, ctx):
                    self._call("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
                    self._call("cuEventRecord", ev, None)  # NULL stream: the context's legacy default stream
        except BaseException:
            self._release(armed)
            raise
        return armed

    def _release(self, armed) -> None:
        """Destroy the events and release every retained context, even after a failure (the first is raised)."""
        first = None
        for dev, ctx, ev in armed:
            for step in ((lambda: self._destroy(ctx, ev)) if ev.value else None,
                         lambda: self._call("cuDevicePrimaryCtxRelease_v2", ctypes.c_int(dev))):
                try:
                    if step is not None:
                        step()
                except FenceError as exc:
                    first = first or exc
        if first is not None:
            raise first

    def _destroy(self, ctx, ev) -> None:
        with _current(self, ctx):
            self._call("cuEventDestroy_v2", ev)

    def wait(self, bound_s: float) -> float:
        t0 = time.perf_counter()
        armed = self._arm()
        try:
            pending = list(armed)
            while pending:
                pending = [a for a in pending if self._query(a) == CUDA_ERROR_NOT_READY]
                if not pending or time.perf_counter() - t0 >= bound_s:
                    break
                time.sleep(POLL_S)
            self.waits += 1
            self.timeouts += bool(pending)
        finally:
            self._release(armed)
        return time.perf_counter() - t0

    def _query(self, armed) -> int:
        with _current(self, armed[1]):
            return self._call("cuEventQuery", armed[2])


class _current:
    """Make ``ctx`` current on this thread for the block (push/pop: the thread's own context stays)."""

    def __init__(self, fence: StreamFence, ctx) -> None:
        self.fence, self.ctx = fence, ctx

    def __enter__(self):
        self.fence._call("cuCtxPushCurrent_v2", self.ctx)

    def __exit__(self, *exc) -> None:
        self.fence._call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))
