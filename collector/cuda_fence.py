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
covered: the drain's adaptive wait stays the floor for it (collector.drain), the bound still ends
the wait, and whatever is unfinished is counted as before.

Polling, never a blocking synchronize: a kernel that never ends (a persistent kernel) cannot hold
the collector's thread in the poll beyond the bound. The driver calls themselves (retain, record,
release) may still block inside the driver for a while, e.g. behind a full launch queue; not
bounded here. Side effect: an event on the legacy stream is a barrier across the context's blocking
streams, once a detach (none for PyTorch, whose side streams are non-blocking; CuPy's streams and
raw ``cudaStreamCreate`` streams are blocking).

CUDA graph capture: while another thread captures in the default global mode, an event query from
this thread would invalidate the capture, and while a blocking stream captures, the legacy stream
cannot be used at all. So every fence runs with this thread's capture mode exchanged to relaxed
(``cuThreadExchangeStreamCaptureMode``, restored after), and asks ``cuStreamIsCapturing`` about the
legacy stream before recording: a blocking stream capturing (error 906) skips the fence for this
detach (``skipped``; the drain then sleeps its adaptive wait), it does not drop it. A capture that
starts between that check and the record is hit by the record (a capture error from any later call):
the program's capture may then have failed, so the fence raises ``FenceError`` and the drain drops
it for good, counted in the window's health. The window is a few microseconds a detach.

Hazards it does not remove (``CUDAWATCH_DETACH_DRAIN=adaptive`` avoids both): the event on the
legacy stream is a barrier across the context's blocking streams, so a kernel that spins on one
blocking stream until work queued later on another blocking stream has run would wait behind the
barrier for ever (a program hang, not only a bounded wait); and a program that destroys its context
(``cudaDeviceReset``) while a fence polls makes the poll use a freed event. The last detach, at the
program's end, fences too (with a longer bound, ``collector.drain.FINAL_MAX_S``): Python's ``atexit``
handlers run before the CUDA runtime tears its contexts down, and a context already reset reads as
``idle``; an ``atexit`` handler that resets the device while the fence polls is the hazard above.
The last detach left to the collector's thread after ``stop()`` gave up on it does not fence.

Driver API through ctypes (``libcuda.so.1``), like the rest of the collector's GPU code only in
``collector/``; ``lib`` takes a stand-in for CPU tests. The fence is armed after the traced kinds
are disabled and before the forced flush and ``cuptiFinalize`` (the ``callback`` finalizer
subscribes only after the forced flush), so the driver calls here are never traced and never
finalize CUPTI. On by default since it was checked on an H100 (driver 580;
``benchmarks/fence_check.py``: legacy, blocking and non-blocking streams, the bound, graph captures beside it, and a control
without the capture-mode exchange, whose captures all failed) and lost 0 records where the adaptive
wait alone lost 3-23 % (docs/benchmarks.md §16); ``CUDAWATCH_DETACH_DRAIN=adaptive`` turns it off.
"""

from __future__ import annotations

import ctypes
import time

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEINITIALIZED = 4
CUDA_ERROR_NOT_READY = 600
CAPTURE_ERRORS = range(900, 909)  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ... _WRONG_THREAD
CU_EVENT_DISABLE_TIMING = 0x2
CU_STREAM_CAPTURE_MODE_RELAXED = 2
CU_STREAM_CAPTURE_STATUS_NONE = 0
POLL_S = 0.0005
#: Every driver entry point the fence calls, looked up before the first call: a driver that lacks one
#: (``cuDevicePrimaryCtxRelease_v2`` came with CUDA 11.0) fails before any context is retained.
SYMBOLS = ("cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRetain",
           "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuStreamIsCapturing",
           "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventDestroy_v2", "cuThreadExchangeStreamCaptureMode")


class FenceError(RuntimeError):
    """A driver call failed: the fence cannot be used in this process."""

    def __init__(self, message: str, rc: int | None = None) -> None:
        super().__init__(message)
        self.rc = rc


class FenceSkipped(Exception):
    """A blocking stream captures a graph: no fence for this detach (the fence stays)."""


class StreamFence:
    """``wait(bound_s)`` returns the seconds waited: until the work queued before the call is done on
    every active primary context's legacy stream, or ``bound_s``, whichever comes first; None when a
    graph capture skipped it."""

    def __init__(self, lib=None) -> None:
        self._lib = lib
        self._checked = False
        # counted once a wait has cleaned up (events destroyed, contexts released, capture mode back):
        # a wait that fails counts in none of them (the drain drops the fence and counts the detach)
        self.waits = 0
        self.timeouts = 0  # waits the bound ended (work still queued, or on a kernel that never ends)
        self.skipped = 0  # no fence this time: the legacy stream or a blocking stream was capturing a graph
        self.idle = 0  # fences with nothing to wait for: CUDA not (or no longer) initialized, no active context
        self.timed_out = False  # whether the latest wait ended at the bound with work still queued

    def check(self) -> None:
        """Load the driver and look up every entry point the fence calls, without calling any (no
        context, no ``cuInit``); raises FenceError saying what is missing (``cudawatch doctor``)."""
        self._cu()

    def _cu(self):
        if self._lib is None:
            try:
                self._lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise FenceError(f"libcuda.so.1 not loadable: {exc}") from exc
        if not self._checked:
            missing = []
            for name in SYMBOLS:
                try:
                    getattr(self._lib, name)
                except (AttributeError, OSError):
                    missing.append(name)
            if missing:
                raise FenceError(f"the driver lacks {', '.join(missing)}")
            self._checked = True
        return self._lib

    def _call(self, name: str, *args) -> int:
        try:
            rc = getattr(self._cu(), name)(*args)
        except (AttributeError, OSError, ctypes.ArgumentError) as exc:  # a driver without the symbol
            raise FenceError(f"{name}: {exc}") from exc
        if rc in CAPTURE_ERRORS:
            if name == "cuStreamIsCapturing":  # asked before any use of the legacy stream: nothing hit
                raise FenceSkipped(f"{name} returned CUDA error {rc} (graph capture)")
            raise FenceError(f"{name} returned CUDA error {rc}: it hit a CUDA graph capture, which may have failed", rc)
        if rc != CUDA_SUCCESS and not (rc == CUDA_ERROR_NOT_READY and name == "cuEventQuery"):
            raise FenceError(f"{name} returned CUDA error {rc}", rc)
        return rc

    def _devices(self) -> int:
        """How many devices; 0 when CUDA was never initialized (cuInit here would cost the program)
        or has shut down: then nothing is queued."""
        count = ctypes.c_int(0)
        try:
            self._call("cuDeviceGetCount", ctypes.byref(count))
        except FenceError as exc:
            if exc.rc in (CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_DEINITIALIZED):
                return 0
            raise
        return count.value

    def _arm(self, devices: int) -> list[tuple[int, ctypes.c_void_p, ctypes.c_void_p]]:
        """One event per active primary context, recorded on its legacy default stream."""
        armed = []
        try:
            for ordinal in range(devices):
                dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
                self._call("cuDeviceGet", ctypes.byref(dev), ordinal)
                self._call("cuDevicePrimaryCtxGetState", dev, ctypes.byref(flags), ctypes.byref(active))
                if not active.value:  # never retain an inactive context: that would create one on the GPU
                    continue
                ctx, ev = ctypes.c_void_p(), ctypes.c_void_p()
                self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
                armed.append((dev.value, ctx, ev))
                with _current(self, ctx):
                    status = ctypes.c_int(CU_STREAM_CAPTURE_STATUS_NONE)
                    self._call("cuStreamIsCapturing", None, ctypes.byref(status))  # 906 if a blocking stream captures
                    if status.value != CU_STREAM_CAPTURE_STATUS_NONE:
                        raise FenceSkipped("the legacy stream is capturing")
                    self._call("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
                    self._call("cuEventRecord", ev, None)  # NULL stream: the context's legacy default stream
        except BaseException:
            self._release(armed)
            raise
        return armed

    def _release(self, armed) -> None:
        """Destroy the events and release every retained context, even after a failure (the first is raised)."""
        failures: list[BaseException] = []

        def attempt(fn, *args) -> None:
            try:
                fn(*args)
            except BaseException as exc:  # also Ctrl-C: every context is released before it propagates
                failures.append(exc)

        for dev, ctx, ev in armed:
            if ev.value:
                attempt(self._destroy, ctx, ev)
            attempt(self._call, "cuDevicePrimaryCtxRelease_v2", ctypes.c_int(dev))
        if failures:
            raise failures[0]

    def _destroy(self, ctx, ev) -> None:
        with _current(self, ctx):
            self._call("cuEventDestroy_v2", ev)

    def wait(self, bound_s: float) -> float | None:
        """Seconds waited; None when skipped for a graph capture; raises FenceError when the driver
        fails (or a call hit a capture)."""
        t0 = time.perf_counter()
        self.timed_out = False
        devices = self._devices()
        if not devices:
            self.idle += 1
            return 0.0
        mode, swapped, skipped = ctypes.c_int(CU_STREAM_CAPTURE_MODE_RELAXED), False, False
        armed, pending = [], []
        try:
            self._call("cuThreadExchangeStreamCaptureMode", ctypes.byref(mode))  # relaxed; mode: the old one
            swapped = True
            armed = self._arm(devices)
            try:
                pending = list(armed)
                while pending:
                    pending = [a for a in pending if self._query(a) == CUDA_ERROR_NOT_READY]
                    if not pending or time.perf_counter() - t0 >= bound_s:
                        break
                    time.sleep(POLL_S)
            finally:
                self._release(armed)
        except FenceSkipped:
            skipped = True
        finally:
            if swapped:
                self._call("cuThreadExchangeStreamCaptureMode", ctypes.byref(mode))  # back to the thread's old mode
        if skipped:
            self.skipped += 1
            return None
        self.waits += bool(armed)
        self.idle += not armed
        self.timeouts += bool(pending)
        self.timed_out = bool(pending)
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
