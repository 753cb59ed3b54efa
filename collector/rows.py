"""Turn aggregated windows into the ``kernels``, ``memcpy`` and ``health`` tables of shard contract v1.

Pure pyarrow (no CUPTI). ``ProcessMeta`` holds what is constant for a process; ``DeviceInfo`` maps a
CUDA device ordinal to its UUID, NVML index and model. ``sampling_duty`` is the fraction of the
time the collector was alive in a window during which tracing was on (the adaptive duty cycle), so
analytics can scale counts by ``1 / sampling_duty``.

Health rows (contract v2) also carry the window's data quality, counted by delivery time:
``records_delivered`` = ``records_valid`` + ``invalid_zero_timestamp`` + ``invalid_end_before_start``;
``data_quality`` (``quality_of``) is ``error`` when CUPTI delivered records but none was valid (or
it dropped records and none arrived), so an empty window can never pass for "no kernels ran".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa

from collector.aggregate import Window
from collector.demangle import demangle
from cudawatch.shards import SCHEMA_VERSIONS, kernel_id_of

_UTC = dt.timezone.utc


@dataclass(frozen=True)
class DeviceInfo:
    uuid: str | None = None
    index: int | None = None
    model: str | None = None


@dataclass
class ProcessMeta:
    """Identity of the traced process and its collector session."""

    host: str
    job: str
    run_id: str
    pid: int
    cupti_version: str | None = None
    devices: dict[int, DeviceInfo] = field(default_factory=dict)
    alive_from_s: float = 0.0  # UNIX time the collector started
    alive_to_s: float | None = None  # UNIX time it stopped (None while running)
    budget_pct: float = 2.0

    def device(self, ordinal: int) -> DeviceInfo:
        return self.devices.get(ordinal) or DeviceInfo(index=ordinal)


def _ts(sec: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(sec, _UTC)


def duty_of(w: Window, window_s: int, meta: ProcessMeta) -> float:
    """Fraction of the collector's lifetime inside window ``w`` during which tracing was on."""
    lo = max(float(w.start_s), meta.alive_from_s)
    hi = float(w.start_s + window_s)
    if meta.alive_to_s is not None:
        hi = min(hi, meta.alive_to_s)
    alive = hi - lo
    if alive <= 0:
        return 1.0 if w.traced_s > 0 else 0.0
    return float(min(1.0, max(0.0, w.traced_s / alive)))


def kernels_table(windows: list[Window], window_s: int, meta: ProcessMeta) -> pa.Table:
    cols: dict[str, list] = {k: [] for k in (
        "window_start", "window_s", "host", "gpu_uuid", "gpu_index", "gpu_model", "job", "run_id", "pid",
        "kernel", "kernel_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", "shared_mem_bytes", "launches", "total_ns", "min_ns", "max_ns",
        "sumsq_ns2", "hist_bucket", "hist_count", "sampling_duty")}
    for w in windows:
        duty = duty_of(w, window_s, meta)
        start = _ts(w.start_s)
        for (name, gx, gy, gz, bx, by, bz, regs, smem, dev), s in w.kernels.items():
            d = meta.device(dev)
            buckets = sorted(s.hist)
            for k, v in (("window_start", start), ("window_s", window_s), ("host", meta.host), ("gpu_uuid", d.uuid),
                         ("gpu_index", d.index), ("gpu_model", d.model), ("job", meta.job), ("run_id", meta.run_id),
                         ("pid", meta.pid), ("kernel", demangle(name)), ("kernel_id", kernel_id_of(name)),
                         ("grid_x", gx), ("grid_y", gy), ("grid_z", gz), ("block_x", bx), ("block_y", by),
                         ("block_z", bz), ("registers_per_thread", regs), ("shared_mem_bytes", smem),
                         ("launches", s.launches), ("total_ns", s.total_ns), ("min_ns", s.min_ns),
                         ("max_ns", s.max_ns), ("sumsq_ns2", s.sumsq_ns2), ("hist_bucket", buckets),
                         ("hist_count", [s.hist[b] for b in buckets]), ("sampling_duty", duty)):
                cols[k].append(v)
    return _table("kernels", cols)


def memcpy_table(windows: list[Window], window_s: int, meta: ProcessMeta) -> pa.Table:
    cols: dict[str, list] = {k: [] for k in (
        "window_start", "window_s", "host", "gpu_uuid", "gpu_index", "job", "run_id", "pid", "copy_kind",
        "src_kind", "dst_kind", "count", "bytes", "total_ns", "sampling_duty")}
    for w in windows:
        duty = duty_of(w, window_s, meta)
        start = _ts(w.start_s)
        for (kind, src, dst, dev), s in w.copies.items():
            d = meta.device(dev)
            for k, v in (("window_start", start), ("window_s", window_s), ("host", meta.host), ("gpu_uuid", d.uuid),
                         ("gpu_index", d.index), ("job", meta.job), ("run_id", meta.run_id), ("pid", meta.pid),
                         ("copy_kind", kind), ("src_kind", src), ("dst_kind", dst), ("count", s.count),
                         ("bytes", s.bytes), ("total_ns", s.total_ns), ("sampling_duty", duty)):
                cols[k].append(v)
    return _table("memcpy", cols)


def quality_of(w: Window) -> str:
    """``ok`` (every delivered record valid, none dropped), ``degraded`` (some invalid or dropped,
    some valid), ``error`` (records delivered or dropped but none valid), ``idle`` (nothing
    delivered, nothing dropped: no GPU activity while traced). A collector error in the window
    makes ``ok``/``idle`` ``degraded``."""
    if w.valid == 0 and (w.delivered > 0 or w.dropped > 0):
        return "error"
    if w.invalid or w.dropped or w.errors:
        return "degraded"
    return "ok" if w.delivered else "idle"


def health_table(windows: list[Window], window_s: int, meta: ProcessMeta) -> pa.Table:
    cols: dict[str, list] = {k: [] for k in (
        "schema_version", "window_start", "window_s", "host", "job", "run_id", "pid", "records", "dropped_records",
        "callback_s", "overhead_pct", "sampling_duty", "cupti_version", "records_delivered", "records_valid",
        "invalid_zero_timestamp", "invalid_end_before_start", "collector_errors", "last_error", "data_quality")}
    for w in windows:
        duty = duty_of(w, window_s, meta)
        lo = max(float(w.start_s), meta.alive_from_s)
        hi = float(w.start_s + window_s) if meta.alive_to_s is None else min(w.start_s + window_s, meta.alive_to_s)
        alive = max(hi - lo, 1e-9)
        for k, v in (("schema_version", SCHEMA_VERSIONS["health"]), ("window_start", _ts(w.start_s)), ("window_s", window_s),
                     ("host", meta.host), ("job", meta.job),
                     ("run_id", meta.run_id), ("pid", meta.pid), ("records", w.records), ("dropped_records", w.dropped),
                     ("callback_s", w.callback_s), ("overhead_pct", 100.0 * w.cost_s / alive),
                     ("sampling_duty", duty), ("cupti_version", meta.cupti_version), ("records_delivered", w.delivered),
                     ("records_valid", w.valid), ("invalid_zero_timestamp", w.invalid_zero_ts),
                     ("invalid_end_before_start", w.invalid_order), ("collector_errors", w.errors),
                     ("last_error", w.last_error), ("data_quality", quality_of(w))):
            cols[k].append(v)
    return _table("health", cols)


def _table(name: str, cols: dict[str, list]) -> pa.Table:
    from cudawatch.shards import SCHEMAS

    schema = SCHEMAS[name]
    arrays = [pa.array(v, type=schema.field(k).type) for k, v in cols.items()]
    return pa.Table.from_arrays(arrays, names=list(cols))
