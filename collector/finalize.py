"""How a detach ends: ``cuptiFinalize`` on the collector's thread, or at an application thread's API exit.

``CUDAWATCH_FINALIZE=thread`` (the default, unchanged): the collector's thread calls
``cuptiFinalize`` right after the forced flush, while the application's threads keep issuing CUDA
calls. CUPTI's documentation ("Dynamic detach", docs.nvidia.com/cupti, and its ``cupti_finalize``
sample) recommends calling ``cuptiFinalize`` from the exit callsite of a CUDA runtime/driver API
callback instead; pytorch/kineto PR #686 ("Safely teardown CUPTI") moved to that after a
``cuptiFinalize`` on another thread raced with CUPTI work in flight and crashed (SIGSEGV during
``cuptiActivityFlushAll``). One process of 12 detaching ~48 times a minute died with a SIGSEGV on
the H200 (2026-12-04).

``CUDAWATCH_FINALIZE=callback`` (opt-in: on the H200 it finalized in the callback 292 times of 308
with no error, but left ~2.7 k Python allocator blocks per detach; docs/benchmarks.md §8): after
the forced flush the collector's thread subscribes a callback (``cupti.subscribe``), enables the ``DRIVER_API`` callback
domain (``cupti.enable_domain``) and arms it; the first ``API_EXIT`` callback on any application
thread unsubscribes, calls ``cupti.finalize()`` there and sets the ``threading.Event`` of that
subscription's generation, which the collector's thread waits on (a new Event and failure slot per
generation: a late callback of an older one can never complete a newer round). ``DRIVER_API``
only: a runtime call that does GPU work reaches the driver, and cupti-python 12.8's documentation
lists ``RUNTIME_API`` as unsupported for callbacks (a refused ``enable_domain`` would turn every
detach into a fallback). Order and locking:

* The forced flush (kinds disabled before it) has delivered every buffer on the collector's thread
  before the callback is armed, so no buffer-completed callback is pending when ``cuptiFinalize``
  runs inside the API callback.
* The callback runs on an application thread, inside its CUDA call, holding the GIL. It never waits
  for the collector's thread: it takes ``self._lock`` only for a state change or to note a failure (the collector holds
  it for nothing else, never across a CUPTI call or a wait), and cupti-python releases the GIL
  around its CUPTI calls (seen in the 13.4 binary for ``cuptiFinalize``), so a buffer or API
  callback on another thread is not stuck behind it. Exactly one party finalizes: the state moves
  from ARMED to CLAIMED once, under the lock, and a callback of an older subscription (its
  ``userdata`` is an older generation) does nothing.
* While the domain is on (until the first API exit: microseconds in a busy program), every driver
  call on every thread runs a Python callback that needs the GIL. A native thread that calls CUDA
  while holding a lock of its own (PyTorch's caching allocator around ``cudaMalloc``) waits there
  for the GIL; if the GIL holder then waits for that lock, it is a deadlock: both threads hang
  for good, the program with them. Not a bounded window: the timeout cannot end it (the
  collector's thread needs the GIL too). Only the chance of entering it is limited to the time
  the domain is on. Any Python CUPTI callback has this exposure — one reason this mode is opt-in
  until measured.
* The domain is enabled before arming, so no callback can finalize while ``enable_domain`` is
  still running (a CUPTI call after ``cuptiFinalize`` would attach CUPTI again).
* The callback claims the round inside a ``try`` whose ``finally`` sets that round's Event, and
  catches everything: no exception reaches cupti-python, and the collector's thread is always
  woken. A failure is counted (``errors``) and raised again on the collector's thread; one before
  ``cuptiFinalize`` started makes the collector's thread finalize itself (``fallback``).
* An exception in the collector's wait (Ctrl-C while ``Session.stop`` detaches on the main thread)
  claims the round, unsubscribes and finalizes before it propagates (``fallback``), so no
  subscription is left armed.
* No API exit within ``timeout_s`` (200 ms): the collector's thread finalizes itself and counts it
  (``by_timeout``). Then no CUDA call has returned for 200 ms: the application is idle (nothing in
  flight: the safe case), or a thread is blocked in one long call (a synchronize waiting for the
  GPU) — in that case it is the ``thread`` mode's exposure, no worse, and counted, while waiting
  longer would stall the collector's loop (windows, shards) on an idle program.
* ``cupti.subscribe`` refused (CUPTI 13.4 serves one subscriber per process:
  ``ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``) or ``enable_domain`` failed: the collector's thread
  finalizes as in ``thread`` mode and counts a ``fallback`` with the reason (counted before the
  call, so a failing ``cuptiFinalize`` keeps it; the failure itself goes to ``errors``, as on the
  timeout path). Never a crash, never an attach left open.

Counters: ``summary()`` (printed by benchmarks/memory.py and benchmarks/overhead.py). A failure
that raises is counted by the session in ``health``; one the finalize survives (a failed
unsubscribe, a callback that failed before its finalize, a finalize failing under Ctrl-C) is
handed to ``CuptiTracer.detach`` by ``take_unraised()`` and counted there (the window's ``health``
and ``collector_errors_total``). A finalize failing under Ctrl-C is noted too, but the interrupt
then ends ``Session.stop`` before the last windows are written; a callback failure arriving after
the collector gave up waiting (``STARTED_LIMIT_S``) is noted and counted at the next detach, if
there is one. The CUPTI
parts are checked on CPU with a stand-in ``cupti`` module (tests/collector/test_finalize.py).
"""

from __future__ import annotations

import os
import threading

MODES = ("thread", "callback")
#: Longest wait for an API exit before the collector's thread finalizes itself.
DEFAULT_TIMEOUT_S = 0.2
#: Longest wait for a finalize an API callback has already started (cuptiFinalize takes milliseconds).
STARTED_LIMIT_S = 10.0
_IDLE, _ENABLING, _ARMED, _CLAIMED = "idle", "enabling", "armed", "claimed"


def finalize_mode(raw: str | None = None) -> str:
    """``raw`` (default: ``CUDAWATCH_FINALIZE``; unset or empty: ``thread``), checked."""
    if raw is None:
        raw = os.environ.get("CUDAWATCH_FINALIZE")
    mode = "thread" if raw is None or raw == "" else raw
    if mode not in MODES:
        raise ValueError(f"CUDAWATCH_FINALIZE must be one of {', '.join(MODES)}, got {raw!r}")
    return mode


def _why(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__}: {exc}" + (f" (status {status})" if status is not None else "")


class DetachFinalizer:
    """Calls ``cuptiFinalize`` for ``CuptiTracer.detach`` and counts where it ran.

    Args:
        mode: ``"thread"`` or ``"callback"``; ``None`` reads ``CUDAWATCH_FINALIZE`` (a bad value
            raises ``ValueError`` naming it: the session then turns the collector off, not the program).
        timeout_s: longest wait for an application thread's API exit (callback mode).
    """

    def __init__(self, mode: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.mode = finalize_mode(mode)
        self.timeout_s = timeout_s
        self.in_thread = 0  # thread mode: finalized on the collector's thread, as before
        self.in_callback = 0  # callback mode: finalized at an application thread's API exit
        self.by_timeout = 0  # callback mode: no API exit within timeout_s, finalized on the collector's thread
        self.fallback = 0  # callback mode: subscribing/enabling failed, finalized on the collector's thread
        self.errors = 0  # failed cuptiUnsubscribe calls (the finalize still ran), failed callbacks, failed finalizes
        # cuptiFinalize calls that returned, wherever they ran: also one that returned after the collector's
        # thread stopped waiting for it (each keeps ~FINALIZE_KEEPS_GPU_MIB of GPU memory)
        self.completed = 0
        self.last_fallback: str | None = None
        self.last_error: str | None = None
        self._unraised: list[str] = []  # failures the finalize survived, for the window's health (take_unraised)
        self._lock = threading.Lock()
        self._state = _IDLE
        self._gen = 0
        self._round: _Round | None = None  # the current generation's subscription
        self._exit_site = None
        self._callback = self._on_api  # one object for every subscription (cupti-python keeps a reference)

    def summary(self) -> dict:
        """Where the finalizes ran so far, for benchmarks and logs."""
        return {"mode": self.mode, "completed": self.completed, "in_thread": self.in_thread, "in_callback": self.in_callback,
                "by_timeout": self.by_timeout, "fallback": self.fallback, "errors": self.errors,
                "last_fallback": self.last_fallback, "last_error": self.last_error}

    def take_unraised(self) -> list[str]:
        """The failures since the last call that raised nothing (a failed ``cuptiUnsubscribe``, a callback
        that failed before its finalize, a finalize that failed under Ctrl-C): ``CuptiTracer.detach``
        puts each in the window's ``health`` as a collector error, so none is only in ``summary()``."""
        with self._lock:
            out, self._unraised = self._unraised, []
        return out

    def _note_unraised(self, what: str) -> None:
        with self._lock:
            self._unraised.append(what)

    def finalize(self) -> str:
        """``cuptiFinalize`` for a detach whose forced flush is done (collector's thread); returns
        where it ran: ``"thread"``, ``"callback"``, ``"timeout"`` or ``"fallback"``. Raises what
        ``cuptiFinalize`` raised, wherever it ran."""
        from cupti import cupti

        if self.mode == "thread":
            cupti.finalize()
            self._completed()
            self.in_thread += 1
            return "thread"
        try:
            exit_site = int(cupti.ApiCallbackSite.API_EXIT)
            # DRIVER_API only: every runtime call that does GPU work reaches the driver, so its exit
            # comes as promptly; cupti-python 12.8's documentation lists RUNTIME_API as unsupported
            # for callbacks, and a refused enable_domain would turn every detach into a fallback.
            domain = cupti.CallbackDomain.DRIVER_API
            handle = cupti.subscribe(self._callback, self._gen + 1)
        except Exception as exc:  # another subscriber (ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) or CUPTI refused
            return self._fall_back(cupti, f"subscribe: {_why(exc)}")
        rnd = _Round(cupti, handle)  # this generation's Event and failure slot, never shared with another
        with self._lock:
            self._gen += 1
            self._round, self._exit_site, self._state = rnd, exit_site, _ENABLING
        try:
            try:
                cupti.enable_domain(1, handle, domain)
            except Exception as exc:
                with self._lock:
                    self._state = _IDLE
                return self._fall_back(cupti, f"enable_domain: {_why(exc)}", handle)
            with self._lock:
                self._state = _ARMED
            if not rnd.done.wait(self.timeout_s):
                if self._claim(rnd):  # no API exit: finalize here (see the module docstring for why that is acceptable)
                    self.by_timeout += 1
                    self._finalize_here(cupti, handle, "finalize after the timeout")
                    return "timeout"
                # a callback claimed it just now: its cuptiFinalize is under way
                if not rnd.done.wait(STARTED_LIMIT_S):
                    with self._lock:  # a failure of that callback from now on is noted, not raised
                        rnd.abandoned, failed = True, rnd.failed
                    if failed is not None:  # it failed just now, before it could wake this thread
                        self._note_unraised(f"API callback: {_why(failed)}")
                    raise RuntimeError(
                        f"cuptiFinalize in an API-exit callback did not return within {STARTED_LIMIT_S:g} s")
        except BaseException as exc:  # Ctrl-C in the wait (Session.stop on the main thread): never leave it armed
            if self._claim(rnd):
                self.fallback += 1
                self.last_fallback = f"interrupted: {_why(exc)}"
                try:
                    self._finalize_here(cupti, handle, "finalize after an interrupt")
                except BaseException:  # the interrupt is what propagates; this failure goes to health
                    self._note_unraised(self.last_error or "finalize after an interrupt failed")
            raise
        with self._lock:
            if self._round is rnd:
                self._state = _IDLE
        if rnd.failed is not None:
            if not rnd.started:  # the callback failed before its cuptiFinalize: finalize here
                self._note_unraised(f"API callback: {_why(rnd.failed)}")
                return self._fall_back(cupti, f"callback failed before finalize: {_why(rnd.failed)}", handle)
            raise rnd.failed
        return "callback"

    # ---- application thread ----------------------------------------------------------------
    def _on_api(self, userdata, domain, cbid, data) -> None:
        """CUPTI driver API callback, on an application thread inside its CUDA call, holding the
        GIL. Returns at once unless armed and at an API exit; never waits for the collector, and
        never lets an exception escape into cupti-python."""
        rnd = None
        try:
            if self._state != _ARMED or userdata != self._gen:
                return
            if getattr(data, "callback_site", None) != self._exit_site:
                return
            with self._lock:
                if self._state != _ARMED or userdata != self._gen:
                    return
                self._state = _CLAIMED
                rnd = self._round
            self._unsubscribe(rnd.cupti, rnd.handle)
            rnd.started = True
            rnd.cupti.finalize()
            self._completed()
            self.in_callback += 1
        except BaseException as exc:  # raised again (or finalized) on the collector's thread
            self.errors += 1
            self.last_error = f"API callback: {_why(exc)}"
            if rnd is not None:
                with self._lock:
                    rnd.failed = exc
                    late = rnd.abandoned  # the collector's thread no longer waits to raise it
                if late:
                    self._note_unraised(f"API callback after the collector stopped waiting: {_why(exc)}")
        finally:
            if rnd is not None:
                rnd.done.set()

    # ---- helpers -------------------------------------------------------------------------
    def _completed(self) -> None:
        """Count a ``cuptiFinalize`` that returned; under the lock, since a late callback's may return
        on an application thread while the collector's thread finalizes the next round."""
        with self._lock:
            self.completed += 1

    def _unsubscribe(self, cupti, handle) -> None:
        """Unsubscribe before finalizing (as kineto does); a failure is counted and the finalize still
        runs (it ends every subscription: CUPTI's cupti_finalize sample subscribes again after each)."""
        try:
            cupti.unsubscribe(handle)
        except Exception as exc:
            self.errors += 1
            self.last_error = f"unsubscribe: {_why(exc)}"
            self._note_unraised(self.last_error)

    def _claim(self, rnd: "_Round") -> bool:
        """Collector's thread: take this round from ENABLING/ARMED to CLAIMED (False: a callback has it)."""
        with self._lock:
            mine = self._round is rnd and self._state in (_ENABLING, _ARMED)
            if mine:
                self._state = _CLAIMED
            return mine

    def _unsubscribe_and_finalize(self, cupti, handle, what: str) -> None:
        """Collector's thread: unsubscribe (when subscribed) and finalize; a failure is counted and raised."""
        try:
            if handle is not None:
                self._unsubscribe(cupti, handle)
            cupti.finalize()
            self._completed()
        except BaseException as exc:
            self.errors += 1
            self.last_error = f"{what}: {_why(exc)}"
            raise

    def _finalize_here(self, cupti, handle, what: str) -> None:
        """Collector's thread, round claimed: unsubscribe and finalize, then the finalizer is idle."""
        try:
            self._unsubscribe_and_finalize(cupti, handle, what)
        finally:
            with self._lock:
                self._state = _IDLE

    def _fall_back(self, cupti, why: str, handle=None) -> str:
        self.fallback += 1  # counted before the call: the reason is kept even if cuptiFinalize fails
        self.last_fallback = why
        self._unsubscribe_and_finalize(cupti, handle, "finalize in a fallback")
        return "fallback"


class _Round:
    """One generation's subscription: the Event its callback sets and the slot for its failure."""

    __slots__ = ("cupti", "handle", "done", "failed", "started", "abandoned")

    def __init__(self, cupti, handle) -> None:
        self.cupti, self.handle = cupti, handle
        self.done = threading.Event()
        self.failed: BaseException | None = None
        self.started = False  # the callback has reached cuptiFinalize
        self.abandoned = False  # the collector's thread stopped waiting for it (STARTED_LIMIT_S)
