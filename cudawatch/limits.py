"""Physical limits of shard contract v1: the values a row can hold and still describe a real GPU.

``cudawatch.shards`` fixes the types; this module fixes the ranges. A value outside them cannot
come from a working collector or agent (a corrupted file, a bug, a host with a wrong clock), and
``analytics.validate`` rejects the row at ingest so it never reaches baselines, detection, rules or
reports. The bounds are deliberately wide (several times what any GPU shipped by 2026 reaches):
they catch impossible values, not unusual ones. docs/shards.md ("Limits") explains each.

Pure data, no dependencies: collectors may import it to check what they write.
"""

from __future__ import annotations

import datetime as dt

#: How far a row's timestamp may lie outside its partition hour (clock steps, late flushes).
PARTITION_SKEW = dt.timedelta(minutes=5)
#: How far ahead of the ingesting host's clock a timestamp may be.
MAX_FUTURE = dt.timedelta(minutes=15)
#: No shard can be older than this (CUPTI activity records of this kind need CUDA 11+, 2020).
EARLIEST = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)

#: Longest aggregation window a collector may use (windows divide the hour).
MAX_WINDOW_S = 3600
#: Kernel launches per second one process can issue (CUDA graphs reach ~1e6/s; 2x margin).
MAX_LAUNCHES_PER_S = 2_000_000
#: Kernels that run at once on one device (128 for compute capability 7.0 to 10.x); bounds the
#: summed kernel time of a window: total_ns <= window_s * 1e9 * MAX_CONCURRENT_KERNELS.
MAX_CONCURRENT_KERNELS = 128
#: Copies (memcpy/memset) per second one process can issue.
MAX_COPIES_PER_S = 2_000_000
#: Copy engines busy at once on one device (bounds the summed copy time of a window).
MAX_CONCURRENT_COPIES = 64
#: Bytes per second one process can copy (above HBM3e at 8 TB/s, NVLink 5 at 1.8 TB/s).
MAX_COPY_BYTES_PER_S = 20e12

#: A shard with more than this fraction of its rows rejected is quarantined whole: its writer is
#: broken, and its remaining rows are not to be trusted either.
QUARANTINE_FRACTION = 0.5

#: Inclusive [low, high] of single columns, per table. ``None`` means unbounded on that side.
#: Nulls pass (nullable columns mean "not measured"); floats must also be finite.
COLUMN_RANGES: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "kernels": {
        "window_s": (1, MAX_WINDOW_S),
        "pid": (0, None),
        "gpu_index": (0, 1023),
        "grid_x": (1, 2**31 - 1),
        "grid_y": (1, 65535),
        "grid_z": (1, 65535),
        "block_x": (1, 1024),
        "block_y": (1, 1024),
        "block_z": (1, 64),
        "registers_per_thread": (0, 255),
        "shared_mem_bytes": (0, 1 << 20),
        "sumsq_ns2": (0, None),
    },
    "memcpy": {
        "window_s": (1, MAX_WINDOW_S),
        "pid": (0, None),
        "gpu_index": (0, 1023),
        "bytes": (0, None),
    },
    "device": {
        "gpu_index": (0, 1023),
        "sm_util_pct": (0, 100),
        "sm_occupancy_pct": (0, 100),
        "tensor_util_pct": (0, 100),
        "dram_bw_util_pct": (0, 100),
        "pcie_tx_bytes_s": (0, 1e12),
        "pcie_rx_bytes_s": (0, 1e12),
        "power_w": (0, 3000),
        "temp_c": (-40, 150),
        "sm_clock_mhz": (0, 5000),
        "mem_clock_mhz": (0, 40000),
        "clocks_event_reasons": (0, 2**32 - 1),
        "mem_used_bytes": (0, 1 << 42),
    },
    "health": {
        "window_s": (1, MAX_WINDOW_S),
        "pid": (0, None),
        "records": (0, None),
        "dropped_records": (0, None),
        "callback_s": (0, MAX_WINDOW_S),
        "overhead_pct": (0, 100),
        # v2 data-quality counts (null in v1 rows)
        "records_delivered": (0, None),
        "records_valid": (0, None),
        "invalid_zero_timestamp": (0, None),
        "invalid_end_before_start": (0, None),
        "collector_errors": (0, None),
    },
}

#: Rules that relate columns of one row (checked by analytics.validate, in this order):
#:   sampling_duty            in (0, 1] (null: not duty-cycled); health [0, 1]   every window table
#:   launches                 in [1, window_s * MAX_LAUNCHES_PER_S]              kernels
#:   total_ns                 in [launches, window_s * 1e9 * MAX_CONCURRENT_KERNELS] and
#:                            total_ns / launches <= window_s * 1e9 (a launch ends within a window)
#:   min_ns, max_ns           0 <= min_ns <= max_ns <= window_s * 1e9
#:   count                    in [1, window_s * MAX_COPIES_PER_S]                memcpy
#:   total_ns                 in [1, window_s * 1e9 * MAX_CONCURRENT_COPIES]     memcpy
#:   bytes                    <= window_s * MAX_COPY_BYTES_PER_S                 memcpy
#:   timestamp                within the partition hour +- PARTITION_SKEW, not after the ingest
#:                            time + MAX_FUTURE, not before EARLIEST
ROW_RULES = ("sampling_duty", "launches", "total_ns", "min_max_ns", "count", "bytes", "time")
