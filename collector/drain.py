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
too long costs the collector's thread time, a wait too short costs records). The wait runs on the collector's
thread; the program keeps running meanwhile, attached with every kind disabled (no records, a
fraction of the traced launch cost), and the session counts the wait in the detach/attach cycle's
time, i.e. it is charged to the overhead budget in full. ``max_s`` = 0 turns the wait off.
Pure arithmetic, no CUPTI: tested on CPU.
"""

from __future__ import annotations

import os

#: Longest wait (seconds). 100 ms holds ~6,600 queued 15 us kernels or ~65 queued 8192^3 bf16
#: matmuls; with the ~16-77 ms a detach + attach takes, a cycle then stays near the 150 ms the
#: controller already assumes per cycle (collector.control.CYCLE_FLOOR_S).
DEFAULT_MAX_S = 0.1
DEFAULT_START_S = 0.01
DEFAULT_MIN_S = 0.002
#: Factor per detach that lost nothing: back across a doubling in log(2)/log(1/0.95) = 13.5 detaches.
SHRINK = 0.95


class DetachDrain:
    """The adaptive wait before a detach's forced flush, and what it has seen.

    Args:
        max_s: longest wait; ``None`` reads ``CUDAWATCH_DETACH_DRAIN_MS`` (default 100 ms), 0 turns
            the wait off (the detach then force-flushes at once, as before).
        start_s / min_s: first and shortest wait.
    """

    def __init__(self, max_s: float | None = None, *, start_s: float = DEFAULT_START_S, min_s: float = DEFAULT_MIN_S) -> None:
        if max_s is None:
            raw = os.environ.get("CUDAWATCH_DETACH_DRAIN_MS")
            try:
                max_s = DEFAULT_MAX_S if raw is None or raw == "" else float(raw) / 1e3
            except ValueError:
                raise ValueError(f"CUDAWATCH_DETACH_DRAIN_MS must be a number of milliseconds, got {raw!r}") from None
        if max_s < 0:
            raise ValueError(f"the longest detach drain must be >= 0 s, got {max_s}")
        self.max_s = max_s
        self.min_s = min(min_s, max_s)
        self.current_s = min(start_s, max_s)
        self.detaches = 0  # detaches seen
        self.lost = 0  # records without timestamps returned by the forced flushes
        self.lossy = 0  # detaches whose forced flush returned any
        self.waited_s = 0.0  # total time waited

    def wait_s(self) -> float:
        """How long the next detach waits before its forced flush."""
        return self.current_s

    def note(self, lost: int, waited_s: float) -> None:
        """Record one detach: ``lost`` records came back without timestamps after waiting ``waited_s``."""
        self.detaches += 1
        self.waited_s += waited_s
        if lost > 0:
            self.lost += lost
            self.lossy += 1
            self.current_s = min(self.max_s, max(self.current_s, self.min_s) * 2.0)
        else:
            self.current_s = max(self.min_s, self.current_s * SHRINK)
