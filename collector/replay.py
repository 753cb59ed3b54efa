"""Replay of recorded CUPTI records through the real collector session, for tests and demos.

``ReplayTracer`` has the interface of ``collector.tracer.CuptiTracer`` (attach, enable, disable,
flush, dropped, detach) but reads records recorded on a GPU (``CUDAWATCH_RECORD_DUMP`` writes
them; ``tests/data/cupti/records.jsonl.gz`` holds 4000 from an H200 training loop) and hands them
to the aggregator at their recorded pace (or ``speed`` times faster, durations unchanged), shifted
to the present, looping when they run out; records without timestamps come back unchanged, in
the buffer they were recorded in (``load_records``), so a capture from a lossy run replays as lossy. With
``CUDAWATCH_REPLAY=<file>`` a ``collector.start()`` uses it instead of CUPTI, so the whole session
(duty cycle, windows, spool, rotation, SIGTERM and exit flush) runs on a machine without a GPU.
"""

from __future__ import annotations

import bisect
import gzip
import json
import threading
import time
from operator import itemgetter

from collector.aggregate import Aggregator
from collector.drain import DetachDrain

_AT = itemgetter(0)  # a record's recorded start (an untimed one's: where CUPTI delivered it)


def load_records(path, *, untimed: list | None = None) -> tuple[list, list]:
    """Kernel ``(start, end, signature)`` and copy tuples from a ``.jsonl.gz`` dump, in time order.

    Records without a timestamp (start or end 0: what CUPTI returns for kernels still in flight at a
    forced flush) have no time to order or replay them by. They are left out, or, when ``untimed``
    is a list, appended to it as ``(at_ns, is_kernel, record)``: ``at_ns`` is the start of the
    nearest timed record before them in the dump (the buffer CUPTI delivered them in; the first
    timed record's for those before any), so a replay delivers them where CUPTI did."""
    kernels, copies, pending = [], [], []
    last = None
    with gzip.open(path, "rt") as fh:
        for line in fh:
            item = json.loads(line)
            rec = item["rec"]
            is_kernel = item["kind"] == "kernel"
            r = (rec[0], rec[1], tuple(rec[2:])) if is_kernel else tuple(rec)
            if rec[0] > 0 and rec[1] > 0:
                (kernels if is_kernel else copies).append(r)
                last = rec[0]
                if untimed is not None and pending:  # untimed records before the first timed one
                    untimed.extend((last, k, u) for k, u in pending)
                    pending = []
            elif untimed is not None:
                if last is None:
                    pending.append((is_kernel, r))
                else:
                    untimed.append((last, is_kernel, r))
    kernels.sort(key=lambda r: r[0])
    copies.sort(key=lambda r: r[0])
    return kernels, copies


class ReplayTracer:
    """Feeds recorded records to ``agg`` as if CUPTI had just delivered them."""

    def __init__(self, agg: Aggregator, path, budget=None, *, speed: float | None = None) -> None:
        import os

        self.agg = agg
        self.speed = float(speed or os.environ.get("CUDAWATCH_REPLAY_SPEED") or 1.0)
        self.budget = budget
        untimed: list = []  # records without timestamps, replayed unchanged where CUPTI delivered them
        self._kernels, self._copies = load_records(path, untimed=untimed)
        if not self._kernels and not self._copies:
            raise ValueError(f"{path}: no records with timestamps to replay" + (
                f" ({len(untimed)} without: nothing to place them in time by)" if untimed else ""))
        self._untimed = sorted(untimed, key=_AT)  # all three lists in time order: a flush bisects them by it
        starts = [r[0] for r in self._kernels[:1] + self._copies[:1]]
        ends = [r[1] for r in self._kernels[-1:] + self._copies[-1:]]
        self._t0 = min(starts)
        self._span = max(ends) - self._t0 + 1
        self.kernels = self.copies = self.overheads = self.overhead_ns = 0
        self.callback_s = 0.0
        self.buffers_requested = self.buffers_completed = self.buffers_outstanding_max = 0  # no CUPTI buffers
        self.attached = self.enabled = False
        self.detach_errors = 0  # CuptiTracer's interface: a replay has no cuptiFinalize or fence to fail
        self.finalizes = 0  # detaches of an attached replay, each standing for a cuptiFinalize
        self.op_lock = threading.RLock()  # CuptiTracer's interface; a replay never blocks in a driver call
        self.drain = DetachDrain(0.0)  # recorded records are complete: a detach never waits
        self.clock_offset_ns = 0
        self._delivered_until = 0  # replay-relative ns already handed out
        self._wall0: int | None = None

    def attach(self) -> None:
        if not self.attached:
            if self._wall0 is None:  # the replay clock starts at the first attach
                self._wall0 = time.time_ns()
                self.clock_offset_ns = self._wall0 - self._t0
            # records of the detached interval are never delivered, as with CUPTI
            self._delivered_until = int((time.time_ns() - self._wall0) * self.speed)
            self.attached = True
        self.enable()

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False

    def flush(self, force: bool = True) -> None:
        """Deliver the records whose recorded time has come (only while enabled, like CUPTI)."""
        if not self.attached:
            return
        t0 = time.perf_counter()
        now_rel = int((time.time_ns() - self._wall0) * self.speed)
        lo, hi = self._delivered_until, now_rel
        self._delivered_until = now_rel
        if not self.enabled or hi <= lo:
            return
        ks, cs = [], []
        for loop in range(lo // self._span, hi // self._span + 1):
            shift = loop * self._span
            a, b = lo - shift + self._t0, hi - shift + self._t0  # this loop's part of [lo, hi), in recorded ns
            for src, out in ((self._kernels, ks), (self._copies, cs)):
                for r in src[bisect.bisect_left(src, a, key=_AT):bisect.bisect_left(src, b, key=_AT)]:
                    start = self._t0 + int((r[0] - self._t0 + shift) / self.speed)  # compressed timeline, real durations
                    out.append((start, start + r[1] - r[0]) + tuple(r[2:]))
            u = self._untimed
            for _, is_kernel, r in u[bisect.bisect_left(u, a, key=_AT):bisect.bisect_left(u, b, key=_AT)]:
                (ks if is_kernel else cs).append(r)  # as recorded: the aggregator counts them invalid
        now = time.time()
        if ks:
            self.agg.add_kernels(ks, now)
        if cs:
            self.agg.add_copies(cs, now)
        self.kernels += len(ks)
        self.copies += len(cs)
        self.buffers_completed += 1
        self.callback_s += time.perf_counter() - t0

    def dropped(self) -> int:
        return 0

    def pause(self) -> None:
        self.detach()

    def detach(self, *, final: bool = False, fence: bool = True) -> None:  # recorded records: nothing to wait for
        if self.attached:
            self.flush(True)
            self.finalizes += 1
        self.enabled = False
        self.attached = False
