"""How a detach ends: ``cuptiFinalize`` on the collector's thread, or at an application thread's API exit.

``CUDAWATCH_FINALIZE=thread`` (the default, unchanged): the collector's thread calls
``cuptiFinalize`` right after the forced flush, while the application's threads keep issuing CUDA
calls. CUPTI's documentation ("Dynamic detach", docs.nvidia.com/cupti, and its ``cupti_finalize``
sample) recommends calling ``cuptiFinalize`` from the exit callsite of a CUDA runtime/driver API
callback instead; pytorch/kineto PR #686 ("Safely teardown CUPTI") moved to that after a
``cuptiFinalize`` on another thread raced with CUPTI work in flight and crashed (SIGSEGV during
``cuptiActivityFlushAll``). One process of 12 detaching ~48 times a minute died with a SIGSEGV on
the H200 (2026-12-04).

``CUDAWATCH_FINALIZE=callback`` (opt-in, not yet measured on the GPU): after the forced flush the
collector's thread subscribes a callback (``cupti.subscribe``), enables the ``RUNTIME_API`` and
``DRIVER_API`` callback domains (``cupti.enable_domain``) and arms it; the first ``API_EXIT``
callback on any application thread unsubscribes, calls ``cupti.finalize()`` there and sets a
``threading.Event`` the collector's thread waits on. Order and locking:

* The forced flush (kinds disabled before it) has delivered every buffer on the collector's thread
  before the callback is armed, so no buffer-completed callback is pending when ``cuptiFinalize``
  runs inside the API callback.
* The callback runs on an application thread, inside its CUDA call, holding the GIL. It never waits
  for the collector's thread: it takes ``self._lock`` only for a state change (the collector holds
  it for nothing else, never across a CUPTI call or a wait), and cupti-python releases the GIL
  around its CUPTI calls (seen in the 13.4 binary for ``cuptiFinalize``), so a buffer or API
  callback on another thread is not stuck behind it. Exactly one party finalizes: the state moves
  from ARMED to CLAIMED once, under the lock, and a callback of an older subscription (its
  ``userdata`` is an older generation) does nothing.
* While the domains are on (until the first API exit: microseconds in a busy program), every CUDA
  call on every thread runs a Python callback that needs the GIL. A native thread that calls CUDA
  while holding a lock of its own (PyTorch's caching allocator around ``cudaMalloc``) waits there
  for the GIL; if the GIL holder waits for that lock, both hang. Any Python CUPTI callback has this
  exposure; here it is limited to that window — one reason this mode is opt-in until measured.
* Domains are enabled before arming, so no callback can finalize between the two
  ``enable_domain`` calls (a CUPTI call after ``cuptiFinalize`` would attach CUPTI again).
* No API exit within ``timeout_s`` (200 ms): the collector's thread finalizes itself and counts it
  (``by_timeout``). Then no CUDA call has returned for 200 ms: the application is idle (nothing in
  flight: the safe case), or a thread is blocked in one long call (a synchronize waiting for the
  GPU) — in that case it is the ``thread`` mode's exposure, no worse, and counted, while waiting
  longer would stall the collector's loop (windows, shards) on an idle program.
* ``cupti.subscribe`` refused (CUPTI 13.4 serves one subscriber per process:
  ``ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``) or ``enable_domain`` failed: the collector's thread
  finalizes as in ``thread`` mode and counts a ``fallback`` with the reason. Never a crash, never
  an attach left open.

Counters: ``summary()`` (printed by benchmarks/memory.py and benchmarks/overhead.py). The CUPTI
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
        self.errors = 0  # failed cuptiUnsubscribe calls (the finalize still ran) and failed finalizes in a callback
        self.last_fallback: str | None = None
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._state = _IDLE
        self._gen = 0
        self._handle = None
        self._cupti = None
        self._exit_site = None
        self._done = threading.Event()
        self._failed: BaseException | None = None
        self._callback = self._on_api  # one object for every subscription (cupti-python keeps a reference)

    def summary(self) -> dict:
        """Where the finalizes ran so far, for benchmarks and logs."""
        return {"mode": self.mode, "in_thread": self.in_thread, "in_callback": self.in_callback,
                "by_timeout": self.by_timeout, "fallback": self.fallback, "errors": self.errors,
                "last_fallback": self.last_fallback, "last_error": self.last_error}

    def finalize(self) -> str:
        """``cuptiFinalize`` for a detach whose forced flush is done (collector's thread); returns
        where it ran: ``"thread"``, ``"callback"``, ``"timeout"`` or ``"fallback"``. Raises what
        ``cuptiFinalize`` raised, wherever it ran."""
        from cupti import cupti

        if self.mode == "thread":
            cupti.finalize()
            self.in_thread += 1
            return "thread"
        try:
            exit_site = int(cupti.ApiCallbackSite.API_EXIT)
            domains = (cupti.CallbackDomain.RUNTIME_API, cupti.CallbackDomain.DRIVER_API)
            handle = cupti.subscribe(self._callback, self._gen + 1)
        except Exception as exc:  # another subscriber (ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) or CUPTI refused
            return self._fall_back(cupti, f"subscribe: {_why(exc)}")
        self._done.clear()
        self._failed = None
        with self._lock:
            self._gen += 1
            self._handle, self._cupti, self._exit_site, self._state = handle, cupti, exit_site, _ENABLING
        try:
            for domain in domains:
                cupti.enable_domain(1, handle, domain)
        except Exception as exc:
            with self._lock:
                self._state = _IDLE
            self._unsubscribe(cupti, handle)
            return self._fall_back(cupti, f"enable_domain: {_why(exc)}")
        with self._lock:
            self._state = _ARMED
        if not self._done.wait(self.timeout_s):
            with self._lock:
                mine = self._state == _ARMED
                if mine:
                    self._state = _CLAIMED
            if mine:  # no API exit: finalize here (see the module docstring for why that is acceptable)
                try:
                    self._unsubscribe(cupti, handle)
                    cupti.finalize()
                finally:
                    with self._lock:
                        self._state = _IDLE
                self.by_timeout += 1
                return "timeout"
            # a callback claimed it just now: its cuptiFinalize is under way
            if not self._done.wait(STARTED_LIMIT_S):
                raise RuntimeError(f"cuptiFinalize in an API-exit callback did not return within {STARTED_LIMIT_S:g} s")
        with self._lock:
            self._state = _IDLE
        if self._failed is not None:
            raise self._failed
        return "callback"

    # ---- application thread ----------------------------------------------------------------
    def _on_api(self, userdata, domain, cbid, data) -> None:
        """CUPTI runtime/driver API callback, on an application thread inside its CUDA call, holding
        the GIL. Returns at once unless armed and at an API exit; never waits for the collector."""
        if self._state != _ARMED or userdata != self._gen:
            return
        try:
            if data.callback_site != self._exit_site:
                return
        except Exception:  # an unexpected callback payload: not an exit we can recognize
            return
        with self._lock:
            if self._state != _ARMED or userdata != self._gen:
                return
            self._state = _CLAIMED
            cupti, handle = self._cupti, self._handle
        try:
            self._unsubscribe(cupti, handle)
            cupti.finalize()
            self.in_callback += 1
        except BaseException as exc:  # raised again on the collector's thread (it counts errors)
            self.errors += 1
            self.last_error = f"finalize in an API callback: {_why(exc)}"
            self._failed = exc
        finally:
            self._done.set()

    # ---- helpers -------------------------------------------------------------------------
    def _unsubscribe(self, cupti, handle) -> None:
        """Unsubscribe before finalizing (as kineto does); a failure is counted and the finalize still
        runs (it ends every subscription: CUPTI's cupti_finalize sample subscribes again after each)."""
        try:
            cupti.unsubscribe(handle)
        except Exception as exc:
            self.errors += 1
            self.last_error = f"unsubscribe: {_why(exc)}"

    def _fall_back(self, cupti, why: str) -> str:
        cupti.finalize()
        self.fallback += 1
        self.last_fallback = why
        return "fallback"
