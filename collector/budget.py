"""How the collector bounds CUPTI's buffer memory (pure arithmetic; used by collector.tracer)."""

from __future__ import annotations


class BufferBudget:
    """Split of the activity-buffer memory budget (bytes).

    ``total`` (default 32 MiB, the design's activity buffer manager) is divided as: host buffers of
    ``total/4`` handed to CUPTI from the buffer-requested callback (CUPTI holds at most two at a time,
    one filling and one being drained, because our completed callback folds a buffer in
    milliseconds), and CUPTI's device-side buffers of ``total/8`` with a pool limit of 4
    (``CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`` / ``_DEVICE_BUFFER_POOL_LIMIT``). Records that do not
    fit are dropped by CUPTI and counted (``health.dropped_records``), never buffered without bound.
    """

    def __init__(self, total_bytes: int = 32 << 20) -> None:
        if total_bytes < 1 << 20:
            raise ValueError(f"buffer budget {total_bytes} B is below the 1 MiB minimum")
        self.total = total_bytes
        self.host_buffer = total_bytes // 4
        self.host_buffers_max = 2
        self.device_buffer = total_bytes // 8
        self.device_pool_limit = 4

    def bound(self) -> int:
        """Upper bound of activity-buffer memory under this budget (equals ``total``)."""
        return self.host_buffer * self.host_buffers_max + self.device_buffer * self.device_pool_limit
