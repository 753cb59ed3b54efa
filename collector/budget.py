"""How the collector bounds CUPTI's buffer memory (arithmetic, and giving freed buffers back; used by collector.tracer)."""

from __future__ import annotations

import ctypes

from cudawatch.config import HOST_BUFFERS_HELD, check_host_buffer, collector_host_buffer, host_buffer_max


#: Default size of each host buffer handed to CUPTI (at most a sixteenth of the budget). 1 MiB since
#: 2026-12-07: the binding builds a whole buffer's record objects in one callback, and on an H100
#: (docs/benchmarks.md §22; one 90-s run per size, three processes at once) a CNN loop traced all
#: the time grew its RSS +105 MiB with 8-MiB buffers against +24 with 1 MiB (+18 with 256 KiB), no
#: record dropped or invalid in any. At the default 30-s period an LM's RSS barely differed (+17.4
#: against +18.8 MiB). Launch-bound overhead at 1 MiB (~6x as many callbacks) is not measured yet.
DEFAULT_HOST_BUFFER = 1 << 20


class BufferBudget:
    """Split of the activity-buffer memory budget (bytes).

    ``total`` (default 32 MiB, the design's activity buffer manager) bounds the buffers, not the
    Python objects the binding makes of their records. Half of it goes to host buffers of
    ``DEFAULT_HOST_BUFFER`` (1 MiB; at most ``total/16``) handed to CUPTI from the buffer-requested
    callback, ``HOST_BUFFERS_HELD`` (8) of them at once (CUPTI was seen holding 7 at once;
    ``CuptiTracer.buffers_outstanding_max`` measures it; until 2026-12-07 the budget assumed 2 and
    allowed buffers of ``total/4``, which CUPTI then held 56 MiB of), the other half to CUPTI's
    device-side buffers of ``total/8`` with a pool limit of 4
    (``CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`` / ``_DEVICE_BUFFER_POOL_LIMIT``). Records that do not
    fit are dropped by CUPTI and counted (``health.dropped_records``), never buffered without bound.
    ``host_buffer_bytes`` (``from_env``: ``CUDAWATCH_HOST_BUFFER_KIB``) sets another host-buffer size:
    the binding turns a whole buffer into Python objects in one callback, so the size sets that
    peak (docs/collector.md).
    """

    def __init__(self, total_bytes: int = 32 << 20, host_buffer_bytes: int | None = None) -> None:
        if total_bytes < 1 << 20:
            raise ValueError(f"buffer budget {total_bytes} B is below the 1 MiB minimum")
        self.total = total_bytes
        self.host_buffer = (min(DEFAULT_HOST_BUFFER, host_buffer_max(total_bytes)) if host_buffer_bytes is None
                            else check_host_buffer(host_buffer_bytes, total_bytes, "the host buffer"))
        self.host_buffers_max = HOST_BUFFERS_HELD
        self.device_buffer = total_bytes // 8
        self.device_pool_limit = 4

    @classmethod
    def from_env(cls, total_bytes: int = 32 << 20, environ: dict | None = None) -> "BufferBudget":
        """The budget with ``CUDAWATCH_HOST_BUFFER_KIB``'s host buffer, if set (``ConfigError`` naming it)."""
        return cls(total_bytes, collector_host_buffer(total_bytes, environ))

    def bound(self) -> int:
        """Activity-buffer memory under this budget if CUPTI holds ``host_buffers_max`` host buffers at a time
        (at most ``total``)."""
        return self.host_buffer * self.host_buffers_max + self.device_buffer * self.device_pool_limit


def trim_heap() -> int:
    """Give free heap memory back to the OS (glibc ``malloc_trim(0)``); returns 1 if it did, else 0.

    The binding mallocs the host buffers CUPTI asks for and frees them after delivery; glibc keeps
    such freed memory in its arenas. On the H200 every detach/attach cycle left RSS ~12-26 MiB
    higher for the first few cycles, and ``malloc_trim`` released most of it
    (docs/collector.md). Not glibc (musl, macOS): nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return int(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return 0
