"""collector.cuda_fence: the detach's fence over the CUDA driver API, against a stand-in libcuda
that keeps the driver's rules we rely on (retain counts, a context stack per thread, events that
complete when the queue ahead of them has drained). The real driver runs on the GPU (docs/collector.md)."""

from __future__ import annotations

import ctypes

import pytest

from collector import cuda_fence
from collector.cuda_fence import FenceError, StreamFence


class StandInDriver:
    """Devices 0..n-1; ``active`` ones have a primary context; an event completes after ``polls``
    queries (None: never). Records every call."""

    def __init__(self, n=2, active=(1,), polls=3, initialized=True, fail=None, capture=None):
        self.n, self.active, self.polls, self.initialized, self.fail = n, set(active), polls, initialized, fail
        self.calls, self.retained, self.stack, self.events, self.queries = [], {}, [], {}, {}
        self._next = 100
        # capture: None; "global" (another thread captures in global mode: an unsafe call from a
        # thread not in relaxed mode invalidates it); "legacy" (the legacy stream captures);
        # "blocking" (a blocking stream captures: the legacy stream is unusable, error 906)
        self.capture, self.mode, self.invalidated = capture, 0, False

    def _rc(self, name):
        self.calls.append(name)
        return 999 if name == self.fail else 0

    def cuThreadExchangeStreamCaptureMode(self, mode):
        self.mode, mode._obj.value = mode._obj.value, self.mode
        return self._rc("cuThreadExchangeStreamCaptureMode")

    def cuStreamIsCapturing(self, stream, status):
        assert stream is None
        if self.capture == "blocking":
            return self._rc("cuStreamIsCapturing") or 906
        status._obj.value = 1 if self.capture == "legacy" else 0
        return self._rc("cuStreamIsCapturing")

    def _unsafe(self):  # an event record or query while another thread captures
        if self.capture == "global" and self.mode != cuda_fence.CU_STREAM_CAPTURE_MODE_RELAXED:
            self.invalidated = True
            return 900
        if self.capture == "blocking":
            self.invalidated = True
            return 906
        return 0

    def cuDeviceGetCount(self, count):
        if not self.initialized:
            return cuda_fence.CUDA_ERROR_NOT_INITIALIZED
        count._obj.value = self.n
        return self._rc("cuDeviceGetCount")

    def cuDeviceGet(self, dev, ordinal):
        dev._obj.value = ordinal
        return self._rc("cuDeviceGet")

    def cuDevicePrimaryCtxGetState(self, dev, flags, active):
        active._obj.value = int(dev.value in self.active)
        return self._rc("cuDevicePrimaryCtxGetState")

    def cuDevicePrimaryCtxRetain(self, ctx, dev):
        rc = self._rc("cuDevicePrimaryCtxRetain")
        if rc == 0:  # a failed retain retains nothing
            ctx._obj.value = 1000 + dev.value
            self.retained[dev.value] = self.retained.get(dev.value, 0) + 1
        return rc

    def cuDevicePrimaryCtxRelease_v2(self, dev):
        self.retained[dev.value] -= 1
        return self._rc("cuDevicePrimaryCtxRelease_v2")

    def cuCtxPushCurrent_v2(self, ctx):
        self.stack.append(ctx.value)
        return self._rc("cuCtxPushCurrent_v2")

    def cuCtxPopCurrent_v2(self, out):
        out._obj.value = self.stack.pop()
        return self._rc("cuCtxPopCurrent_v2")

    def cuEventCreate(self, ev, flags):
        assert flags == cuda_fence.CU_EVENT_DISABLE_TIMING and self.stack
        self._next += 1
        ev._obj.value = self._next
        self.events[self._next] = self.stack[-1]  # the event belongs to the current context
        return self._rc("cuEventCreate")

    def cuEventRecord(self, ev, stream):
        assert stream is None  # the legacy default stream
        assert self.events[ev.value] == self.stack[-1]
        return self._unsafe() or self._rc("cuEventRecord")

    def cuEventQuery(self, ev):
        self.queries[ev.value] = self.queries.get(ev.value, 0) + 1
        if self._unsafe():
            return 900
        if self._rc("cuEventQuery"):
            return 999
        if self.polls is None or self.queries[ev.value] < self.polls:
            return cuda_fence.CUDA_ERROR_NOT_READY
        return 0

    def cuEventDestroy_v2(self, ev):
        del self.events[ev.value]
        return self._rc("cuEventDestroy_v2")


def _balanced(drv):
    assert drv.stack == [] and all(v == 0 for v in drv.retained.values()) and drv.events == {}
    assert drv.mode == 0  # the thread's capture mode is back to what it was


def test_waits_for_the_active_context_only_and_leaves_nothing_behind():
    drv = StandInDriver(n=3, active=(1, 2), polls=4)
    fence = StreamFence(lib=drv)
    waited = fence.wait(1.0)
    assert 0 < waited < 1.0 and fence.timeouts == 0 and fence.waits == 1
    assert sorted(drv.retained) == [1, 2]  # device 0 has no context: never retained (that would create one)
    assert list(drv.queries.values()) == [4, 4]
    _balanced(drv)


def test_a_kernel_that_never_ends_holds_the_wait_only_to_the_bound():
    drv = StandInDriver(polls=None)
    fence = StreamFence(lib=drv)
    waited = fence.wait(0.02)
    assert 0.02 <= waited < 0.5 and fence.timeouts == 1
    _balanced(drv)


def test_a_process_that_never_initialized_cuda_waits_for_nothing():
    drv = StandInDriver(initialized=False)
    fence = StreamFence(lib=drv)
    assert fence.wait(1.0) < 0.05
    assert drv.calls == []  # no cuInit, no context created
    assert (fence.idle, fence.waits) == (1, 0)  # counted apart from real waits


def test_no_active_context_is_an_idle_fence_not_a_wait():
    drv = StandInDriver(n=2, active=())
    fence = StreamFence(lib=drv)
    assert fence.wait(1.0) < 0.05 and (fence.idle, fence.waits, fence.timeouts) == (1, 0, 0)
    assert drv.retained == {} or all(v == 0 for v in drv.retained.values())  # nothing retained
    _balanced(drv)


def test_a_global_mode_capture_on_another_thread_is_left_intact():
    drv = StandInDriver(polls=2, capture="global")
    fence = StreamFence(lib=drv)
    assert fence.wait(1.0) > 0 and fence.waits == 1 and fence.skipped == 0
    assert not drv.invalidated  # the queries ran in relaxed mode
    _balanced(drv)


@pytest.mark.parametrize("capture", ["legacy", "blocking"])
def test_a_capture_on_the_legacy_or_a_blocking_stream_skips_this_fence_only(capture):
    drv = StandInDriver(capture=capture)
    fence = StreamFence(lib=drv)
    assert fence.wait(1.0) is None and fence.skipped == 1 and fence.waits == 0  # None: the drain sleeps instead
    assert not drv.invalidated and "cuEventRecord" not in drv.calls  # asked first, never recorded
    _balanced(drv)
    drv.capture = None
    assert fence.wait(1.0) > 0 and fence.waits == 1  # the next detach fences again


def test_a_capture_that_starts_after_the_check_is_a_fence_error_not_a_skip():
    """cuStreamIsCapturing found no capture, then a blocking stream began one before the record: the
    record hit it (the program's capture may have failed), so the fence must be dropped, not skipped."""
    drv = StandInDriver()
    record = drv.cuEventRecord

    def capture_begins(ev, stream):
        drv.capture = "blocking"
        return record(ev, stream)

    drv.cuEventRecord = capture_begins
    fence = StreamFence(lib=drv)
    with pytest.raises(FenceError, match="cuEventRecord returned CUDA error 906: it hit a CUDA graph capture"):
        fence.wait(1.0)
    assert fence.skipped == 0
    _balanced(drv)


def test_a_failed_capture_mode_exchange_changes_nothing_and_is_not_undone():
    drv = StandInDriver(fail="cuThreadExchangeStreamCaptureMode")
    with pytest.raises(FenceError, match="cuThreadExchangeStreamCaptureMode returned CUDA error 999"):
        StreamFence(lib=drv).wait(1.0)
    assert drv.calls.count("cuThreadExchangeStreamCaptureMode") == 1 and "cuDevicePrimaryCtxRetain" not in drv.calls


@pytest.mark.parametrize("fail", ["cuEventRecord", "cuEventCreate", "cuEventQuery", "cuDevicePrimaryCtxRetain"])
def test_a_driver_error_is_raised_and_every_retained_context_released(fail):
    drv = StandInDriver(n=2, active=(0, 1), fail=fail)
    with pytest.raises(FenceError, match=fail):
        StreamFence(lib=drv).wait(1.0)
    _balanced(drv)


def test_an_interrupt_while_releasing_still_releases_every_context():
    drv = StandInDriver(n=2, active=(0, 1), polls=1)
    destroy = drv.cuEventDestroy_v2

    def interrupted(ev):
        destroy(ev)
        raise KeyboardInterrupt

    drv.cuEventDestroy_v2 = interrupted
    with pytest.raises(KeyboardInterrupt):
        StreamFence(lib=drv).wait(1.0)
    assert drv.events == {} and all(v == 0 for v in drv.retained.values())


def test_a_driver_without_a_symbol_fails_before_any_context_is_retained():
    class Old(StandInDriver):  # a CUDA 10 driver: no cuDevicePrimaryCtxRelease_v2
        cuDevicePrimaryCtxRelease_v2 = property(lambda self: (_ for _ in ()).throw(AttributeError("undefined symbol")))
    drv = Old()
    with pytest.raises(FenceError, match="the driver lacks cuDevicePrimaryCtxRelease_v2"):
        StreamFence(lib=drv).wait(1.0)
    assert drv.calls == [] and drv.retained == {}


def test_without_libcuda_the_fence_says_why():
    fence = StreamFence()
    fence._lib = None
    original = ctypes.CDLL
    try:
        ctypes.CDLL = lambda name: (_ for _ in ()).throw(OSError(f"{name}: cannot open shared object file"))
        with pytest.raises(FenceError, match="libcuda.so.1 not loadable"):
            fence.wait(0.01)
    finally:
        ctypes.CDLL = original


@pytest.mark.parametrize("failing", ["cuEventDestroy_v2", "cuDevicePrimaryCtxRelease_v2"])
def test_a_wait_whose_cleanup_fails_counts_as_no_outcome(failing):
    """The outcome is counted only once the wait has cleaned up: a failure while destroying or
    releasing raises, and the detach is the drain's (a failed fence), not also a wait here."""
    drv = StandInDriver(polls=1, fail=failing)
    fence = StreamFence(lib=drv)
    with pytest.raises(FenceError, match=failing):
        fence.wait(1.0)
    assert (fence.waits, fence.idle, fence.skipped, fence.timeouts, fence.timed_out) == (0, 0, 0, 0, False)
    assert drv.mode == 0  # the thread's capture mode is back all the same
