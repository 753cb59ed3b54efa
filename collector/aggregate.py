"""Per-window aggregation of CUPTI activity records: the work done inside the buffer callback.

Pure Python, no CUPTI: the tracer turns each CUPTI record into a plain tuple and calls the ``add_*``
methods; tests feed recorded tuples from ``tests/data/cupti``. Each kernel signature (mangled
name, grid, block, registers, shared memory, device) in each window keeps count, total, min, max,
sum of squares and the log histogram of shard contract v1 (bucket ``floor(16*log2(d))``, see
``cudawatch.shards.hist_bucket``); memcpy and memset keep count, bytes and total time per
(copy kind, source kind, destination kind, device). This is the streaming summary of the design's
"metric aggregation" step: O(1) work and O(signatures) memory per record, never O(records).

Record tuples (times in CUPTI nanoseconds; ``clock_offset_ns`` maps them to UNIX time):
  kernel: ``(start, end, signature)`` with ``signature = (name, grid_x, grid_y, grid_z, block_x,
  block_y, block_z, registers, shared_mem_bytes, device_id)`` (one tuple per record: the
  signature is the dict key as built, no second tuple)
  memcpy: ``(start, end, copy_kind, src_kind, dst_kind, bytes, device_id)``; memset is a memcpy
  whose copy kind is ``"memset"`` and source kind ``None``.
"""

from __future__ import annotations

import threading
import time
from array import array
from dataclasses import dataclass, field

import numpy as np

#: Histogram resolution of the shard contract (buckets per doubling of the duration).
_BUCKETS_PER_OCTAVE = 16

#: CUPTI enum values (CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind) to contract names.
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed", 6: "device_static", 7: "managed_static"}


@dataclass
class KernelStats:
    """Running summary of one kernel signature in one window."""

    launches: int = 0
    total_ns: int = 0
    min_ns: int = 1 << 62
    max_ns: int = 0
    sumsq_ns2: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)


@dataclass
class CopyStats:
    """Running summary of one (copy kind, src kind, dst kind) in one window."""

    count: int = 0
    bytes: int = 0
    total_ns: int = 0


@dataclass
class Window:
    """Everything aggregated for one window of ``window_s`` seconds starting at ``start_s``."""

    start_s: int
    kernels: dict[tuple, KernelStats] = field(default_factory=dict)
    copies: dict[tuple, CopyStats] = field(default_factory=dict)
    records: int = 0
    overhead_ns: int = 0
    traced_s: float = 0.0
    dropped: int = 0
    callback_s: float = 0.0
    cost_s: float = 0.0
    # data quality, counted by delivery time (the window in which CUPTI handed the records over):
    delivered: int = 0  # kernel/memcpy/memset records CUPTI delivered
    valid: int = 0  # of those, with usable timestamps (aggregated above, by their own time)
    invalid_zero_ts: int = 0  # start or end 0: CUPTI had no timestamp (device buffer pool exhausted, or in flight at a forced flush)
    invalid_order: int = 0  # end < start
    errors: int = 0  # collector operations that failed in this window (flush, pause, resume, status file)
    last_error: str | None = None

    @property
    def invalid(self) -> int:
        return self.invalid_zero_ts + self.invalid_order


class Aggregator:
    """Thread-safe streaming aggregation of activity records into windows.

    Args:
        window_s: window length in seconds (rows of the ``kernels`` table cover one window).
        clock_offset_ns: added to CUPTI timestamps to get UNIX nanoseconds.
    """

    #: durations buffered per signature before they are folded into the summary
    FOLD = 1024

    def __init__(self, window_s: int = 60, clock_offset_ns: int = 0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = int(window_s)
        self._window_ns = self.window_s * 1_000_000_000
        self.clock_offset_ns = int(clock_offset_ns)
        self._lock = threading.RLock()  # re-entrant: a SIGTERM handler may flush inside add_*
        self._windows: dict[int, Window] = {}
        self._bufs: dict[tuple, array] = {}
        self.records_total = 0
        self.delivered_total = 0
        self.valid_total = 0  # delivered kernel/copy records with usable timestamps (records_total adds OVERHEAD ones)
        self.invalid_zero_ts = 0
        self.invalid_order = 0
        self.callback_s = 0.0  # time spent in add_* by the tracer, filled by the tracer

    # ---- the hot path -------------------------------------------------------------------
    def _window(self, start_ns: int) -> Window:
        ws = (start_ns + self.clock_offset_ns) // self._window_ns * self.window_s
        w = self._windows.get(ws)
        if w is None:
            w = self._windows[ws] = Window(ws)
        return w

    @property
    def invalid(self) -> int:
        """Records rejected so far (all reasons)."""
        return self.invalid_zero_ts + self.invalid_order

    def add_kernels(self, records, delivered_at_s: float | None = None) -> int:
        """Aggregate ``(start, end, signature)`` kernel tuples; returns how many were valid."""
        return self.add_kernel_rows([(s, e, *sig) for s, e, sig in records], delivered_at_s)

    def add_kernel_rows(self, rows, delivered_at_s: float | None = None) -> int:
        """Aggregate flat kernel rows ``(start, end, *signature)`` (the tracer's form); returns how
        many were valid. Rows without timestamps (start or end 0) or with end < start are counted
        by reason, in the window of ``delivered_at_s`` (wall clock, default now), never dropped silently.

        Per record this only appends the duration to the signature's int64 buffer (amortized
        O(1)); every ``FOLD`` durations the buffer is folded into the running summary with numpy,
        so memory stays at most ``FOLD x 8`` bytes per open signature.
        """
        n = zero = order = 0
        off, wns, bufs, fold = self.clock_offset_ns, self._window_ns, self._bufs, self.FOLD
        cur_w, cur = None, None
        with self._lock:
            for r in rows:
                start, end = r[0], r[1]
                if start <= 0 or end <= 0:
                    zero += 1
                    continue
                if end < start:
                    order += 1
                    continue
                sig = r[2:]
                wi = (start + off) // wns
                if wi != cur_w:
                    cur_w, cur = wi, bufs.get(wi)
                    if cur is None:
                        cur = bufs[wi] = {}
                buf = cur.get(sig)
                if buf is None:
                    buf = cur[sig] = array("q")
                buf.append(end - start)
                if len(buf) >= fold:
                    self._fold(wi, sig, buf)
                n += 1
            self.records_total += n
            self._note_delivery(delivered_at_s, n + zero + order, n, zero, order, cur_w)
        return n

    def _note_delivery(self, at_s: float | None, delivered: int, valid: int, zero: int, order: int,
                       last_wi: int | None = None) -> None:
        """Count one delivered batch in the window of ``at_s`` (wall clock). Without ``at_s``
        (recorded records fed by tests or replay) the batch's last record window is used, else the
        newest open window, else now."""
        if not delivered:
            return
        if at_s is not None:
            ws = int(at_s // self.window_s * self.window_s)
        elif last_wi is not None:
            ws = last_wi * self.window_s
        elif self._windows or self._bufs:
            ws = max([*self._windows, *(wi * self.window_s for wi in self._bufs)])
        else:
            ws = int(time.time() // self.window_s * self.window_s)
        w = self._windows.get(ws)
        if w is None:
            w = self._windows[ws] = Window(ws)
        w.delivered += delivered
        w.valid += valid
        w.invalid_zero_ts += zero
        w.invalid_order += order
        self.delivered_total += delivered
        self.valid_total += valid
        self.invalid_zero_ts += zero
        self.invalid_order += order

    def _fold(self, wi: int, sig: tuple, buf: array) -> None:
        d = np.frombuffer(buf, dtype=np.int64)
        ws = wi * self.window_s
        w = self._windows.get(ws)
        if w is None:
            w = self._windows[ws] = Window(ws)
        s = w.kernels.get(sig)
        if s is None:
            s = w.kernels[sig] = KernelStats()
        s.launches += int(d.size)
        s.total_ns += int(d.sum())
        s.min_ns = min(s.min_ns, int(d.min()))
        s.max_ns = max(s.max_ns, int(d.max()))
        f = d.astype(np.float64)
        s.sumsq_ns2 += float(np.dot(f, f))
        buckets, counts = np.unique(np.floor(_BUCKETS_PER_OCTAVE * np.log2(np.maximum(f, 1.0))).astype(np.int64), return_counts=True)
        h = s.hist
        for b, c in zip(buckets.tolist(), counts.tolist()):
            h[b] = h.get(b, 0) + c
        w.records += int(d.size)
        per_window = self._bufs.get(wi)
        if per_window is not None and sig in per_window:  # fresh buffer: numpy still views the old one
            per_window[sig] = array("q")

    def _fold_all(self, horizon_s: float | None = None) -> None:
        """Fold buffered durations of windows starting at or before ``horizon_s`` (all when None)."""
        for wi in list(self._bufs):
            if horizon_s is None or wi * self.window_s <= horizon_s:
                for sig, buf in self._bufs.pop(wi).items():
                    if len(buf):
                        self._fold(wi, sig, buf)

    def add_copies(self, records, delivered_at_s: float | None = None) -> int:
        """Aggregate memcpy/memset record tuples; returns how many were valid (invalid ones are
        counted by reason, as in ``add_kernel_rows``)."""
        n = zero = order = 0
        last_wi = None
        with self._lock:
            for start, end, copy_kind, src, dst, nbytes, dev in records:
                if start <= 0 or end <= 0:
                    zero += 1
                    continue
                if end < start:
                    order += 1
                    continue
                w = self._window(start)
                last_wi = w.start_s // self.window_s
                key = (copy_kind, src, dst, dev)
                s = w.copies.get(key)
                if s is None:
                    s = w.copies[key] = CopyStats()
                s.count += 1
                s.bytes += nbytes
                s.total_ns += max(end - start, 0)
                w.records += 1
                n += 1
            self.records_total += n
            self._note_delivery(delivered_at_s, n + zero + order, n, zero, order, last_wi)
        return n

    def add_overhead(self, start_ns: int, end_ns: int) -> None:
        """Account one CUPTI OVERHEAD record (CUPTI's own work, e.g. buffer flush)."""
        if start_ns <= 0:
            return
        with self._lock:
            w = self._window(start_ns)
            w.overhead_ns += max(end_ns - start_ns, 0)
            w.records += 1
            self.records_total += 1

    # ---- bookkeeping, off the hot path ---------------------------------------------------
    def add_traced_time(self, unix_start_s: float, unix_end_s: float) -> None:
        """Record that tracing was on from ``unix_start_s`` to ``unix_end_s`` (for sampling_duty)."""
        with self._lock:
            t = unix_start_s
            while t < unix_end_s:
                ws = int(t // self.window_s * self.window_s)
                seg_end = min(unix_end_s, ws + self.window_s)
                w = self._windows.get(ws)
                if w is None:
                    w = self._windows[ws] = Window(ws)
                w.traced_s += seg_end - t
                t = seg_end

    def note_health(self, unix_s: float, *, dropped: int = 0, callback_s: float = 0.0, cost_s: float = 0.0,
                    error: str | None = None) -> None:
        """Add dropped records, callback time, estimated overhead seconds and a failed collector
        operation (``error``, its message) to the window at ``unix_s``."""
        ws = int(unix_s // self.window_s * self.window_s)
        with self._lock:
            w = self._windows.get(ws)
            if w is None:
                w = self._windows[ws] = Window(ws)
            w.dropped += int(dropped)
            w.callback_s += callback_s
            w.cost_s += cost_s
            if error is not None:
                w.errors += 1
                w.last_error = error[:500]

    def take_closed(self, now_unix_s: float, grace_s: float = 0.0) -> list[Window]:
        """Remove and return windows that ended at least ``grace_s`` before ``now_unix_s``."""
        with self._lock:
            self._fold_all(now_unix_s - grace_s - self.window_s)
            done = [ws for ws in self._windows if ws + self.window_s + grace_s <= now_unix_s]
            return [self._windows.pop(ws) for ws in sorted(done)]

    def take_all(self) -> list[Window]:
        """Remove and return every window (used on exit)."""
        with self._lock:
            self._fold_all()
            out = [self._windows[ws] for ws in sorted(self._windows)]
            self._windows.clear()
            return out

    def open_windows(self) -> int:
        """Windows holding data (summaries or not-yet-folded durations)."""
        with self._lock:
            return len(set(self._windows) | {wi * self.window_s for wi in self._bufs})

    def signatures(self) -> int:
        """Signatures currently held in open windows (the aggregator's memory is O(this))."""
        with self._lock:
            return sum(len(b) for b in self._bufs.values()) + sum(len(w.kernels) + len(w.copies) for w in self._windows.values())

    def buffered_bytes(self) -> int:
        """Bytes held in not-yet-folded duration buffers (at most FOLD x 8 per signature)."""
        with self._lock:
            return sum(b.buffer_info()[1] * b.itemsize for per in self._bufs.values() for b in per.values())
