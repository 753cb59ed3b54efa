"""One collector session inside a user's process: start, duty-cycled tracing, windows, shards, stop.

``start()`` never breaks the program: when the driver, a GPU or cupti-python is missing, or another
CUPTI client is active, it prints one warning (``cudawatch: collector off: <why>``) and returns an
inactive session. Otherwise a daemon thread runs the control loop (one iteration per period,
default 1 s): trace for ``duty x period``, force-flush CUPTI, estimate the cost, choose the next
duty (collector.control), close windows older than the grace time into the crash-safe spool, and
rotate finished hours into shards (collector.spool). ``stop()`` (also at exit and on SIGTERM,
chaining the handler that was installed before) flushes everything and writes the last shards.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

from collector.aggregate import Aggregator
from collector.control import DutyController
from collector.host import device_map, job_name, preflight, warn_once  # noqa: F401  (re-exported)
from collector.rows import ProcessMeta
from collector.spool import Spool, recover
from collector.status import write_status

DUTY_LOG_FIELDS = ("off_at", "duty", "f_on", "on_s", "cost_s", "cycle_s", "period_s", "records", "drain_wait_s", "zero_ts")
DUTY_LOG_MAX = 10_000  # on-phases kept (~3.5 days at the 30 s period)
STOP_JOIN_S = 10.0  # how long stop() waits for the collector's thread (then: is it blocked in a CUPTI call?)

_current: "Session | None" = None
_lock = threading.Lock()


class Session:
    """A running (or inactive) collector.

    Args:
        job: job label (see ``job_name``).
        out: shard root (defaults to ``CUDAWATCH_SHARDS`` or ``./shards``).
        window_s: window length (default 60 s, or the period if longer; ``CUDAWATCH_WINDOW_S``).
        period_s: shortest duty-cycle control period (default 1 s; stretched to amortize
            detach/attach cost, collector.control, at most to the window: cudawatch.config.CollectorTiming).
        budget_pct: overhead budget (default ``cudawatch.config.max_overhead_pct()``).
        buffer_mib: total CUPTI buffer memory (default 32).
        adaptive: duty-cycle under the budget (False: trace all the time).
        off_mode: how tracing pauses between on-phases: ``"detach"`` (cuptiFinalize, the default:
            it restores the uninstrumented launch path) or ``"disable"`` (cuptiActivityDisable;
            on the H200 it left most of the launch-path cost in place, docs/benchmarks.md).
    """

    def __init__(self, job: str | None = None, out: str | os.PathLike | None = None, *, window_s: int | None = None,
                 period_s: float = 1.0, budget_pct: float | None = None, buffer_mib: int = 32, adaptive: bool = True,
                 off_mode: str | None = None, dump_path: str | None = None) -> None:
        from cudawatch.config import PAUSE_MODES, CollectorTiming, ConfigError, collector_adaptive, collector_off_mode, max_overhead_pct

        self.job = job_name(job)
        self.out = Path(out or os.environ.get("CUDAWATCH_SHARDS") or "shards")
        try:  # a bad window or period turns the collector off at start(), never the program
            timing, self._setting_error = CollectorTiming.from_env(window_s, period_s), None
        except ConfigError as exc:
            timing, self._setting_error = CollectorTiming.from_env(environ={}), str(exc)  # the defaults
        self.window_s, self.period_s = timing.window_s, timing.min_period_s
        self.budget_pct = budget_pct if budget_pct is not None else max_overhead_pct()
        self.buffer_mib = buffer_mib
        self.adaptive = adaptive and collector_adaptive()
        self.off_mode = off_mode or collector_off_mode()
        if self.off_mode not in PAUSE_MODES:
            raise ValueError(f"off_mode must be one of {', '.join(PAUSE_MODES)}, got {self.off_mode!r}")
        self.dump_path = dump_path or os.environ.get("CUDAWATCH_RECORD_DUMP")
        self.active = False
        self.reason: str | None = None
        self.stopped = False
        self.controller = DutyController.for_timing(self.budget_pct, timing)
        self._stop_evt = threading.Event()
        self._detach_left = False  # stop() ran: the thread detaches at its end if still attached (stop() found it in CUPTI)
        self._thread: threading.Thread | None = None
        self._prev_sigterm = None
        self._stop_lock = threading.Lock()
        self.duty_log: list[tuple] = []  # the last DUTY_LOG_MAX on-phases; CUDAWATCH_DUTY_LOG (JSON) at stop
        self.duty_log_path = os.environ.get("CUDAWATCH_DUTY_LOG")
        self.errors = 0
        self.dropped_total = 0
        self._device_map_failed = False

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> "Session":
        replay = os.environ.get("CUDAWATCH_REPLAY")
        reason = self._setting_error or (None if replay else preflight())
        if reason:
            self.reason = reason
            warn_once(f"collector off: {reason}")
            return self
        if replay:
            from collector.replay import ReplayTracer as tracer_cls

            version = f"replay of {Path(replay).name}"
        else:
            from collector.tracer import CuptiTracer as tracer_cls
            from collector.tracer import cupti_version

            version = cupti_version()
        from collector.budget import BufferBudget

        self.meta = ProcessMeta(host=socket.gethostname(), job=self.job, run_id=uuid.uuid4().hex[:16], pid=os.getpid(),
                                cupti_version=version, alive_from_s=time.time(), budget_pct=self.budget_pct)
        self.agg = Aggregator(self.window_s)
        try:  # a bad setting (e.g. CUDAWATCH_DETACH_DRAIN_MS) turns the collector off, never the program
            budget = BufferBudget.from_env(self.buffer_mib << 20)
            self.tracer = tracer_cls(self.agg, replay, budget) if replay else tracer_cls(self.agg, budget, dump_path=self.dump_path)
            self.tracer.attach()
        except Exception as exc:
            self.reason = f"CUPTI activity tracing could not start ({exc})"
            warn_once(f"collector off: {self.reason}")
            return self
        self.agg.clock_offset_ns = self.tracer.clock_offset_ns
        try:
            recover(self.out)
        except Exception as exc:  # an old spool we cannot turn into shards stays on disk; counted
            self._error(time.time(), f"recovering old spools under {self.out}", exc)
        self.spool = Spool(self.out, self.meta, self.window_s)
        self.active = True
        from collector.coop import hook_torch_profiler

        hook_torch_profiler(self, warn_once)  # stops this session before torch.profiler takes CUPTI
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._thread = threading.Thread(target=self._loop, name="cudawatch-collector", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Flush and write everything; idempotent, safe from atexit and signal handlers."""
        with self._stop_lock:
            if self.stopped or not self.active:
                self.stopped = True
                return
            self.stopped = True
        self._stop_evt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_JOIN_S)
        self._detach_left = True  # whoever holds the tracer last detaches it: this call, or the thread at its end
        free = self.tracer.op_lock.acquire(blocking=False)  # not free: the thread is blocked in a CUPTI or driver call
        interrupted = None
        try:
            on_since = self._on_since
            was_on, off_at = self.tracer.enabled, time.time()  # traced until here: the detach's drain traces nothing
            if not free:  # a detach beside that call would overlap it (a finalize, a flush): left to the thread
                self._error(time.time(), "final flush/detach",
                            RuntimeError(f"the collector thread is still in a CUPTI or driver call after {STOP_JOIN_S:g} s"))
            else:
                try:
                    self.tracer.detach(final=True)  # disable, unforced flush, drain, forced flush, cuptiFinalize
                except BaseException as exc:  # an interrupt too (a second Ctrl-C in the fence): windows first, then it
                    self._error(time.time(), "final flush/detach", exc)
                    interrupted = None if isinstance(exc, Exception) else exc
            now = time.time()
            if was_on and on_since is not None:
                self.agg.add_traced_time(on_since, off_at)
            self._account(now, on_s=0.0, ask_cupti=free)
        finally:
            if free:
                self.tracer.op_lock.release()
        self.meta.alive_to_s = now
        self.meta.devices = self.meta.devices or (self._device_map(now) if free else {})  # NVML may hang as CUDA did
        self._write_duty_log(now)  # before the last windows are taken, so a failure is counted in them
        self.spool.add_windows(self.agg.take_all())
        self.spool.rotate(final=True)
        self.spool.close()
        write_status(self, now)
        self.active = False
        if interrupted is not None:
            raise interrupted

    def _write_duty_log(self, now: float) -> None:
        try:
            if self.duty_log_path:
                tmp = Path(self.duty_log_path).with_suffix(".tmp")
                tmp.write_text(json.dumps({"pid": self.meta.pid, "job": self.job, "fields": DUTY_LOG_FIELDS, "rows": self.duty_log}))
                os.replace(tmp, self.duty_log_path)
        except OSError as exc:
            self._error(now, f"writing the duty log {self.duty_log_path}", exc)

    def __enter__(self) -> "Session":
        return self.start() if not self.active else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- control loop --------------------------------------------------------------------
    _on_since: float | None = None
    _last = (0, 0, 0.0, 0)

    def _loop(self) -> None:
        try:
            self._cycle()
        finally:  # a stop() that found this thread in a CUPTI call left the last detach to it
            if self._detach_left:
                with self.tracer.op_lock:
                    try:
                        self.tracer.detach(final=True, fence=False)  # nothing to do when stop() detached; the
                        # program may be tearing down by now (stop() gave up on this thread): no driver calls
                    except Exception as exc:
                        self._error(time.time(), "final detach (after stop)", exc)

    def _cycle(self) -> None:
        self._on_since = time.time()
        next_rotate = 0.0
        ctl = self.controller
        while not self._stop_evt.is_set():
            cycle_from = time.time()  # cycles start a period apart: attach time does not push on-phases out of windows
            period = ctl.period_s() if self.adaptive else self.period_s
            duty = ctl.duty if self.adaptive else 1.0
            on_s = duty * period
            cycle = 0.0
            if not self.tracer.enabled:
                t0 = time.perf_counter()
                if not self._resume():
                    return
                cycle += time.perf_counter() - t0
            if self._stop_evt.wait(on_s):
                return
            off_at = time.time()
            paused = False
            if duty < 1.0:
                t0 = time.perf_counter()
                paused = self._pause()
                cycle += time.perf_counter() - t0
            else:
                try:
                    self.tracer.flush(False)  # unforced: a forced flush strands device buffers (tracer docstring)
                except Exception as exc:
                    self._error(off_at, "flush", exc)
            on_from = self._on_since or off_at
            self.agg.add_traced_time(on_from, off_at)
            self._on_since = None if paused else off_at
            est = self._account(off_at, on_s=off_at - on_from)
            if self.adaptive:
                if cycle > 0 and paused:
                    ctl.note_cycle(cycle)
                ctl.update(est)
                self.duty_log.append((off_at, duty, est.fraction_on, est.on_s, est.cost_s, cycle, period, est.records,
                                      *self.tracer.drain.take_last()))  # this pause's drain wait and records it left without timestamps
                del self.duty_log[:-DUTY_LOG_MAX]  # bounded: a collector stays on for weeks
            now = time.time()
            if now >= next_rotate:
                self._close_windows(now)
                next_rotate = now + min(self.window_s, 10)
            rest = period - (time.time() - cycle_from)
            if paused and rest > 0 and self._stop_evt.wait(rest):
                return

    def _pause(self) -> bool:
        try:
            if self.off_mode == "detach":
                self.tracer.pause()
            else:
                self.tracer.disable()
                self.tracer.flush(False)
            return True
        except Exception as exc:
            self._error(time.time(), f"pause ({self.off_mode})", exc)
            return False

    def _device_map(self, now: float):
        """NVML's device map, looked up until it works; a failure is counted once (rows then have no
        GPU UUID). A replay has no GPU by design: nothing to look up."""
        if os.environ.get("CUDAWATCH_REPLAY"):
            return {}
        errors: list[str] = []
        devices = device_map(errors)
        if errors and not self._device_map_failed:
            self._device_map_failed = True
            self.errors += 1
            self.agg.note_health(now, error=errors[-1])
        return devices

    def _error(self, now: float, what: str, exc: BaseException) -> None:
        """Count a failed collector operation in the health row of the window at ``now``."""
        self.errors += 1
        self.agg.note_health(now, error=f"{what}: {type(exc).__name__}: {exc}")

    def _resume(self) -> bool:
        try:
            if self.off_mode == "detach" or not self.tracer.attached:
                self.tracer.attach()
                self.agg.clock_offset_ns = self.tracer.clock_offset_ns
            else:
                self.tracer.enable()
        except Exception as exc:
            self.reason = f"CUPTI could not resume tracing ({exc})"
            self._error(time.time(), "resume", exc)
            warn_once(f"collector off: {self.reason}")
            return False
        self._on_since = time.time()
        return True

    def _account(self, now: float, on_s: float, ask_cupti: bool = True):
        t = self.tracer
        k, c, cb, ovh = t.kernels, t.copies, t.callback_s, t.overhead_ns
        lk, lc, lcb, lovh = self._last
        self._last = (k, c, cb, ovh)
        est = self.controller.estimate(on_s, k - lk, c - lc, cb - lcb, (ovh - lovh) * 1e-9)
        try:
            dropped = t.dropped() if ask_cupti else 0
        except Exception as exc:
            dropped = 0
            self._error(now, "cuptiActivityGetNumDroppedRecords", exc)
        self.dropped_total += dropped
        self.agg.note_health(now, dropped=dropped, callback_s=cb - lcb, cost_s=est.cost_s)
        return est

    def _close_windows(self, now: float) -> None:
        def rows_need_devices(_):
            self.meta.devices = self.meta.devices or self._device_map(now)

        period = self.controller.period_s() if self.adaptive else self.period_s
        closed = self.spool.close_and_rotate(self.agg, now, period, before_spooling=rows_need_devices)
        if closed:
            write_status(self, now, closed[-1])

    # ---- cooperation ---------------------------------------------------------------------
    def _on_sigterm(self, signum, frame) -> None:
        self.stop()
        prev = self._prev_sigterm
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_IGN:
            return
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def start(job: str | None = None, out: str | os.PathLike | None = None, **options) -> Session:
    """Start the process-wide collector (a second call returns the running session)."""
    global _current
    with _lock:
        if _current is not None and _current.active and not _current.stopped:
            return _current
        _current = Session(job, out, **options).start()
        return _current


def stop() -> None:
    """Stop the process-wide collector and write its last shards."""
    global _current
    with _lock:
        s, _current = _current, None
    if s is not None:
        s.stop()


def current() -> Session | None:
    return _current
