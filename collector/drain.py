"""How long a detach waits for kernels still in flight before its forced flush (used by collector.tracer).

A detach disables the traced kinds, then force-flushes CUPTI's buffers and calls ``cuptiFinalize``.
Kernels launched while tracing but still queued on the GPU at the forced flush come back without
timestamps: on the H200, a CNN loop that synchronizes only every 50 steps lost ~430 records per
detach that way (16-18 % of its records at 48 detaches a minute; 0.5 % on loops that synchronize
every step; docs/benchmarks.md §6). Waiting between the disable and the forced flush lets the
queued kernels finish, so their records carry timestamps.

How long is enough depends on how far the program runs ahead of the GPU, so the wait adapts from
what each detach shows: after a detach that still returned records without timestamps the wait
doubles (up to ``max_s``); after one that returned none it shrinks by 5 % (down to ``min_s``),
so it follows a program whose queue gets shorter, probing again only every ~14 detaches (a wait
too long costs the collector's thread time, a wait too short costs records). A loss that a longer
wait did not reduce is not a queue (a kernel that never ends, such as a persistent or NCCL kernel,
or records that lost their timestamps to an exhausted device-buffer pool): the wait then drops back
to ``min_s`` instead of sitting at the maximum on every detach. The wait runs on the collector's
thread; the program keeps running meanwhile, attached with every kind disabled (no records, a
fraction of the traced launch cost), and the session counts the wait in the detach/attach cycle's
time, i.e. it is charged to the overhead budget in full. ``max_s`` = 0 turns the wait off. (The
program's last detach runs on the thread that calls ``stop()``.)

The guess alone keeps missing under GPU sharing (four collectors on one GPU lost 3-23 % of their
records, docs/benchmarks.md §15, §16), so by default (``CUDAWATCH_DETACH_DRAIN=fence``) a detach
first waits on a fence (``collector.cuda_fence.StreamFence``): until the work queued before it has
finished on the legacy default stream (and so every blocking stream) of each active primary context,
at most ``max_s``. The adaptive wait stays as the floor for what the fence cannot see (non-blocking
streams such as NCCL's or PyTorch's side streams, contexts other than the primary ones): when the
fence returns sooner, the detach sleeps the rest of the adaptive wait, which keeps learning from the
losses as above. Under sharing the fence waits as long as the queue needs (0 records lost where the
adaptive wait alone lost 3-23 %, §16-§18); alone on a GPU, with a short queue, it returns within the
adaptive floor, which stays the whole wait, as before (§18: 12 of 12 detaches of a loop that
synchronizes every step). A fence
that fails (no ``libcuda``, a driver error, a call that hit a graph capture) is dropped for the rest
of the process, with the reason counted in ``health``, and the adaptive wait goes on alone; a
blocking stream capturing a graph skips the fence for that detach only. The program's last detach
(``collector.stop()``: at exit, on SIGTERM, or when the program stops the collector) fences too, with
the longer bound ``FINAL_MAX_S``: its records would otherwise be lost for good (on an H100, a stop with
a 1-s kernel and 500 launches queued lost all 501 records without a fence, and took 1.34 s all the
same; docs/benchmarks.md §21). From ``atexit`` the context is normally still there: Python runs its
``atexit`` handlers before the CUDA runtime's own teardown; a handler registered after the collector's
runs before it, and one that resets the device (``cudaDeviceReset``) leaves no active context (``idle``)
unless it runs while the fence polls (``collector.cuda_fence`` has that hazard). The last detach
left to the collector's thread (``stop()`` gave up waiting for it in a CUPTI call, so the program
may be tearing down by the time it returns) does not fence: the session asks for none. A kernel
that never ends on the legacy stream or a blocking stream would hold every fence to ``max_s``: after
``FENCE_TIMEOUTS_TO_DROP`` fences in a row ran to the bound (the fence's ``timed_out``: events still pending; a skip neither
counts nor breaks the row) the fence is dropped like a failed one (a long queue under sharing
ends some fences at the bound, not five in a row: 3 of 45 in §16). ``CUDAWATCH_DETACH_DRAIN=adaptive``
turns the fence off.
Pure arithmetic here, no CUPTI: tested on CPU.
"""

from __future__ import annotations

import os
import time

from collector.cuda_fence import FenceError, StreamFence

#: Longest wait (seconds). 100 ms holds ~6,600 queued 15 us kernels or ~65 queued 8192^3 bf16
#: matmuls; with the 16-77 ms a detach + attach takes, a cycle at the longest wait costs 116-177 ms,
#: about the 150 ms the controller already assumes per cycle (collector.control.CYCLE_FLOOR_S).
DEFAULT_MAX_S = 0.1
#: Bound of the program's last detach (its fence only; ``max_s`` = 0 turns it off too): twice the 1-s
#: queue of docs/benchmarks.md §21, whose records the unfenced stop lost; at most this much longer a
#: stop, once, at the program's end.
FINAL_MAX_S = 2.0
#: Largest accepted ``CUDAWATCH_DETACH_DRAIN_MS``: the wait runs on the collector's thread, which
#: ``stop()`` joins for at most 10 s.
LIMIT_MS = 1000.0
DEFAULT_START_S = 0.01
DEFAULT_MIN_S = 0.002
#: Factor per detach that lost nothing: back across a doubling in log(2)/log(1/0.95) = 13.5 detaches.
SHRINK = 0.95
#: Fences in a row that ran to the bound before the fence is dropped: a kernel that never ends on the
#: legacy stream or a blocking stream (a persistent kernel) would otherwise cost the bound every detach.
FENCE_TIMEOUTS_TO_DROP = 5


class DetachDrain:
    """The adaptive wait before a detach's forced flush, and what it has seen.

    Args:
        max_s: longest wait; ``None`` reads ``CUDAWATCH_DETACH_DRAIN_MS`` (default 100 ms), 0 turns
            the wait off (the detach then force-flushes at once, as before).
        start_s / min_s: first and shortest wait.
    """

    def __init__(self, max_s: float | None = None, *, start_s: float = DEFAULT_START_S, min_s: float = DEFAULT_MIN_S,
                 fence: StreamFence | None = None) -> None:
        if max_s is None:
            raw = os.environ.get("CUDAWATCH_DETACH_DRAIN_MS")
            try:
                max_s = DEFAULT_MAX_S if raw is None or raw == "" else float(raw) / 1e3
            except ValueError:
                max_s = float("nan")
            if not 0 <= max_s <= LIMIT_MS / 1e3:  # also NaN
                raise ValueError(f"CUDAWATCH_DETACH_DRAIN_MS must be a number of milliseconds in [0, {LIMIT_MS:g}], got {raw!r}")
        if not 0 <= max_s <= LIMIT_MS / 1e3:
            raise ValueError(f"the longest detach drain must be in [0, {LIMIT_MS / 1e3:g}] s, got {max_s}")
        self.max_s = max_s
        self.min_s = min(min_s, max_s)
        self.current_s = min(start_s, max_s)
        self.detaches = 0  # detaches seen
        self.lost = 0  # records without timestamps returned by the forced flushes
        self.lossy = 0  # detaches whose forced flush returned any
        self.waited_s = 0.0  # total time waited
        self._last_lossy: tuple[float, int] | None = None  # (wait, lost) of the previous detach, if it lost any
        # and the rules chose its wait
        self._last: tuple[float, int] = (0.0, 0)  # (wait, lost) of the latest detach not yet taken
        self._last_waited_s = 0.0  # the latest detach's whole wait (fence and floor)
        self._fence_set_wait = False  # the latest ``wait()``'s fence outlasted the adaptive wait
        mode = os.environ.get("CUDAWATCH_DETACH_DRAIN") or "fence"
        if mode not in ("adaptive", "fence"):
            raise ValueError(f"CUDAWATCH_DETACH_DRAIN must be 'adaptive' or 'fence', got {mode!r}")
        if fence is None and mode == "fence":
            fence = StreamFence()
        self.fence = fence if max_s > 0 else None  # bounded by max_s; current_s stays the adaptive floor
        self.fence_error: str | None = None
        self._fence_seen = self.fence  # kept for the summary after a failed fence is dropped
        self._timeouts_in_row = 0  # fences in a row that ran to the bound
        self.fence_set = 0  # detaches whose fence outlasted the adaptive floor (the fence set the wait)
        self.final_fenced = 0  # fence attempts of the program's last detach (bound FINAL_MAX_S), whatever their outcome
        self.unfenced = 0  # detaches without a fence after it failed (the failing one too)
        self.unwaited = 0  # detaches without a completed wait: a failure before it, an interrupted fence
        self.failed = 0  # detaches that did not complete (disable to finalize): counted, never fed to the rules
        self._entered = False  # whether the current detach reached ``wait()``
        self._errors: list[str] = []

    def summary(self) -> dict:
        """What the waits did so far, for benchmarks and logs (compare runs per detach: a longer wait
        lengthens the cycle and so the control period). Every detach lands in one count: ``unwaited``
        (it failed before its wait) or, with a fence, ``fence``'s ``waits`` (of which the bound ended
        ``timeouts``), ``skipped`` (a graph capture), ``idle`` (nothing to wait for: CUDA not or no
        longer initialized, no active context) or ``unfenced`` (the fence failed, then or before); an
        interrupted fence wait counts as ``unwaited``; a detach asked to skip the fence (``fence=False``:
        the last one left to the collector's thread after ``stop()`` gave up on it) counts as
        ``unfenced``. ``final_fenced`` counts the last detach's fence attempts (bound ``FINAL_MAX_S``),
        whatever their outcome (JSON written before 2026-12-07 has ``final`` instead: last detaches that
        did not fence); ``set_wait`` counts the fence's waits that outlasted the adaptive floor;
        ``failed``, the detaches that did not complete through their forced flush and finalize (also counted above)."""
        return {"detaches": self.detaches, "lossy": self.lossy, "lost": self.lost, "waited_s": self.waited_s,
                "next_wait_s": self.current_s, "last_waited_s": self._last_waited_s,
                "lost_per_detach": self.lost / max(self.detaches, 1),
                "fence": None if self._fence_seen is None else {
                    **{k: getattr(self._fence_seen, k, 0) for k in ("waits", "timeouts", "skipped", "idle")},
                    "final_fenced": self.final_fenced, "unfenced": self.unfenced, "set_wait": self.fence_set},
                "unwaited": self.unwaited, "failed": self.failed,
                "fence_error": self.fence_error}

    def wait(self, *, final: bool = False, fence: bool = True) -> float:
        """Wait before a detach's forced flush; the seconds waited: on the fence (up to ``max_s``, or
        ``FINAL_MAX_S`` for the program's last detach) when there is one, then the rest of the adaptive
        wait if the fence returned sooner. No fence while a graph capture makes the legacy stream
        unusable (skipped) or when the caller asks for none (``fence=False``). A failed fence is
        dropped for good, counted once in health; the time it took still counts as waited."""
        self._entered = True
        if self.max_s <= 0:
            return 0.0
        fenced = 0.0
        if self.fence is None or not fence:
            self.unfenced += self._fence_seen is not None
        else:
            bound = FINAL_MAX_S if final else self.max_s
            self.final_fenced += final
            t0 = time.perf_counter()
            try:
                got = self.fence.wait(bound)  # None: skipped for a graph capture
                timed_out = got is not None and self.fence.timed_out
            except Exception as exc:  # FenceError, or anything else: never fail a detach over the fence
                fenced = time.perf_counter() - t0
                self.unfenced += 1
                self._drop_fence(str(exc) if isinstance(exc, FenceError) else f"{type(exc).__name__}: {exc}")
            except BaseException:  # an interrupt: no wait completed, and the fence stays
                self._entered = False
                raise
            else:
                fenced = got or 0.0
                self.fence_set += fenced > self.current_s
                if got is not None and not final:  # a skip says nothing about whether the queue ends: the streak
                    # stays; nor does the last fence (its longer bound, and no detach after it to protect)
                    self._timeouts_in_row = self._timeouts_in_row + 1 if timed_out else 0
                if self._timeouts_in_row >= FENCE_TIMEOUTS_TO_DROP:
                    self._drop_fence(f"{self._timeouts_in_row} fences in a row ran to the {self.max_s * 1e3:g}-ms bound "
                                     "(a kernel that never ends?)")
        self._fence_set_wait = fenced > self.current_s  # the wait was the fence's (or a failing one's), not the rules'
        rest = self.current_s - fenced
        if rest > 0:
            time.sleep(rest)
        return fenced + max(rest, 0.0)

    def _drop_fence(self, reason: str) -> None:
        """No fence for the rest of the process; the reason once in health; the adaptive wait goes on."""
        self.fence = None
        self.fence_error = reason
        self._errors.append(f"detach fence: {reason}")

    def take_errors(self) -> list[str]:
        """Failures since the last call, for the window's health (like ``DetachFinalizer.take_unraised``)."""
        errors, self._errors = self._errors, []
        return errors

    def take_last(self) -> tuple[float, int]:
        """(wait, records without timestamps) of the latest detach, once: (0.0, 0) when none came since
        the last call. The session logs it per on-phase (``CUDAWATCH_DUTY_LOG``), so how the loss
        follows the wait can be read per detach, e.g. under GPU sharing."""
        last, self._last = self._last, (0.0, 0)
        return last

    def wait_s(self) -> float:
        """How long the next detach waits at least before its forced flush (the adaptive wait; a fence
        may wait longer, up to ``max_s``)."""
        return self.current_s

    def note(self, lost: int, waited_s: float, *, failed: bool = False) -> None:
        """Record one detach: ``lost`` records came back without timestamps after waiting ``waited_s``.
        When the fence outlasted the adaptive wait, a loss came from work the fence cannot see and the
        wait was the fence's, not the rules': the adaptive wait doubles, and the "waited longer, lost as
        many" rule, which compares waits the rules chose, skips this detach (fence times jitter).
        A ``failed`` detach (a failure or interrupt anywhere from the disable to the finalize) is counted,
        its losses too, but teaches the rules nothing: records it never delivered would read as a clean
        detach."""
        self.detaches += 1
        self.unwaited += not self._entered
        self._entered = False
        self.waited_s += waited_s
        self._last_waited_s = waited_s
        self._last = (waited_s, max(lost, 0))
        fence_set, self._fence_set_wait = self._fence_set_wait, False
        if lost > 0:
            self.lost += lost
            self.lossy += 1
        if failed:
            self.failed += 1
            return
        if lost <= 0:
            self._last_lossy = None
            self.current_s = max(self.min_s, self.current_s * SHRINK)
            return
        prev, self._last_lossy = self._last_lossy, (None if fence_set else (waited_s, lost))
        if prev is not None and not fence_set and waited_s > prev[0] and lost >= prev[1]:
            self.current_s = self.min_s  # waiting longer lost as many: not kernels in a queue
        else:
            self.current_s = min(self.max_s, max(self.current_s, self.min_s) * 2.0)
